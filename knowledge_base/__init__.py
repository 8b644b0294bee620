"""The knowledge base: verified kernels and optimisation guidance, stored in Chroma.

``seed_kernels/<backend>/<problem>.py`` are the shipped, verified reference
kernels that seed a new knowledge base. ``seed_kernels_unverified/<backend>/`` holds
seeds written and compiled (CI compiles them) but not yet verified on a GPU: they
enter the knowledge base only once a GPU run passes them and they move, with their
evidence, into ``seed_kernels/`` (scripts/seed_evidence.py).
"""

from pathlib import Path

SEED_KERNELS_DIR = Path(__file__).resolve().parent / "seed_kernels"
UNVERIFIED_SEEDS_DIR = Path(__file__).resolve().parent / "seed_kernels_unverified"
