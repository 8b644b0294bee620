"""The knowledge base: verified kernels and optimisation guidance, stored in Chroma.

``seed_kernels/<backend>/<problem>.py`` are the shipped, verified reference
kernels that seed a new knowledge base.
"""

from pathlib import Path

SEED_KERNELS_DIR = Path(__file__).resolve().parent / "seed_kernels"
