"""Evaluation: problem format and catalog, verifier, sandboxed execution, results."""
