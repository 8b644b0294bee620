"""Evaluating a candidate: the harness and batches over the rooms problem/, sandbox/, verifier/, checks/,
static_rules/, timing/ and suites/; verdict.py is the vocabulary every room speaks, result.py the result."""
