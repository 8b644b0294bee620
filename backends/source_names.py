"""The names a kernel module's syntax tree mentions, for the backends' strategy features."""

from __future__ import annotations

import ast


def names_in(tree: ast.AST) -> set[str]:
    """Every attribute and bare name under ``tree`` (``tl.dot`` gives "tl" and "dot")."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return names
