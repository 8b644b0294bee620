"""A hash of what code does, not how it is laid out: the dedupe key of the knowledge base.

Two kernels that differ only in comments, docstrings, blank lines or quoting
are the same kernel; hashing the AST (docstrings dropped) makes them collide
on purpose, so an LLM re-emitting a known kernel with new comments adds nothing.
"""

from __future__ import annotations

import ast
import hashlib


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def normalised_code_hash(source: str) -> str:
    """sha256 of the docstring-free code as ``ast.unparse`` writes it; code that does not parse
    hashes its stripped text. Unparsing, not ``ast.dump``: the dump's node fields change between
    Python versions, and a store is shared by machines running different ones."""
    try:
        canonical = ast.unparse(_strip_docstrings(ast.parse(source)))
    except SyntaxError:
        canonical = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(canonical.encode()).hexdigest()
