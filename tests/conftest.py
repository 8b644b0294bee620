"""CI has no GPU: kernels run in Triton's CPU interpreter, chosen before triton is imported."""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
# tests/redteam_cases.py is shared by the red-team tests and scripts/verification_matrix.py
sys.path.insert(0, str(Path(__file__).resolve().parent))
