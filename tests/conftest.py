"""CI has no GPU: kernels run in Triton's CPU interpreter, chosen before triton is imported."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
