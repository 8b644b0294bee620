"""The candidate module inside an LLM's reply.

Models wrap code in Markdown fences, sometimes several (a sketch, then the
module; a shell command to run it), put prose before and after, and end lines
with CRLF. The prompts ask for one ```python block holding the whole module;
this module finds it anyway when a reply strays, and says in a short reason
why not when it cannot, so the reason can go back to the model verbatim.

Choice among blocks: Python-tagged blocks (``python``, ``py``, ``python3``)
first, untagged blocks only when there are none; among those, the ones that
define ``class ModelNew``; of several, one that parses beats one that does not,
then the longest (a full module beats the snippet that repeats part of it).
A reply without fences is taken whole when it parses and defines ``ModelNew``.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
#: an opening fence: up to 3 spaces, 3+ backticks or tildes, an optional info string
_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_CLASS_MODEL_NEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)


class NoCodeError(ValueError):
    """The reply holds no usable candidate module; the message says why in a few words."""


@dataclass(frozen=True)
class _Block:
    tag: str
    code: str


def _fenced_blocks(text: str) -> list[_Block]:
    """Every fenced block, in order; an unclosed last fence runs to the end (a cut-off reply)."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening.group("fence")
        info = opening.group("info").strip().split()
        tag = info[0].lower().lstrip(".{") if info else ""
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # past the closing fence
        blocks.append(_Block(tag=tag, code=textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks


def _defines_model_new(code: str) -> bool:
    return _CLASS_MODEL_NEW.search(code) is not None


def _parse_error(code: str) -> str | None:
    """None when ``code`` parses; else "line N: message"."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:  # e.g. null bytes
        return str(exc)
    return None


def _defines_model_new_class(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def _whole_reply(text: str) -> str | None:
    """The reply itself, when it is a module defining ModelNew and nothing else."""
    code = text.strip("\n")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    return code if _defines_model_new_class(tree) else None


def extract_candidate(reply_text: str) -> str:
    """The candidate module in ``reply_text`` (module doc), ending in one newline.

    Raises :class:`NoCodeError` with a short reason: no Python code block, no
    ``ModelNew`` in the code, or the code does not parse (with its line).
    """
    text = reply_text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = [b for b in _fenced_blocks(text) if b.code.strip()]
    python = [b for b in blocks if b.tag in _PYTHON_TAGS] or [b for b in blocks if not b.tag]
    if not python:
        whole = _whole_reply(text)
        if whole is not None:
            return whole + "\n"
        raise NoCodeError("reply has no python code block")
    with_model = [b.code for b in python if _defines_model_new(b.code)]
    if not with_model:
        raise NoCodeError("code block defines no ModelNew")
    best = max(with_model, key=lambda code: (_parse_error(code) is None, len(code)))
    error = _parse_error(best)
    if error is not None:
        raise NoCodeError(f"code does not parse: {error}")
    if not _defines_model_new_class(ast.parse(best)):
        raise NoCodeError("code block defines no ModelNew at module level")
    return best + "\n"
