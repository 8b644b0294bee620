"""The module inside an LLM's reply: a candidate (``ModelNew``) or a reference problem.

Models write drafts. A reply shows a first attempt and then "here is the corrected, final
version"; or the module and then a short usage example; or imports in one fence and the class
in the next; or no fences at all; with prose around it and CRLF line ends. One rule reads both
kinds of module, so a candidate and a reference problem are never read differently, and when
it finds nothing it says why in a few words that go back to the model verbatim:

1. **Code blocks** are the fenced blocks tagged ``python`` / ``py`` / ``python3`` / ``py3`` or
   untagged. A block in another language (``bash``, ``json``) is never code, except one that is
   a complete module by itself (some models tag Python ``triton``).
2. A block is **complete** when it parses and defines the module's names at top level
   (:data:`CANDIDATE`: ``class ModelNew``; :data:`REFERENCE_PROBLEM`: ``class Model`` and
   ``def get_inputs``); a skeleton class (``pass`` or ``...`` only) defines nothing.
3. **The last complete block wins** — the model's final word, not its longest or first:
   drafts come before finals, and a usage example after the module is not complete, so it
   never wins. An explicit marker overrides order: when blocks are marked final, the last
   complete marked block wins (so "for comparison, the naive version" after it does not). A
   block is marked when its fence's info string has the word ``final``
   (````` ```python final `````), its first line is a comment starting with the word FINAL
   (``# FINAL``, ``# Final version``), or the line before the fence is only a "Final" heading
   (``**Final version:**``, ``### Final code``). Prose such as "the corrected, final version
   below" is not a marker; the last-block rule already handles it.
4. A block that does not parse never wins: a final version with a syntax error falls back to
   the last complete block; with none, the reason names the broken block's line. A block whose
   fence never closes was cut off at the token limit (or the model forgot the fence): it wins
   only when no closed block is complete, since a cut can fall between two statements and
   still parse.
5. **A block split in two** (imports and kernel in one fence, ``ModelNew`` in the next): when
   the winner reads names it never binds, earlier code blocks that bind them are put before
   it, nearest first, in reply order — what pasting them into one file would do, later
   definitions replacing earlier ones. Only earlier blocks, and only definition blocks (no
   top-level calls, no use of the module's own names without defining them), so a usage
   example never becomes part of the module.
6. **A reply without fences** is taken whole, or from its first line of code to a paragraph
   break, when that is a complete module.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass, field

from kgen.errors import KgenError

_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
#: an opening fence: up to 3 spaces, 3+ backticks or tildes, an optional info string
_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_FINAL_WORD = re.compile(r"\bfinal\b", re.IGNORECASE)
_FINAL_COMMENT = re.compile(r"^#+[ \t]*final\b", re.IGNORECASE)
#: a line that is nothing but a "Final ..." heading (Markdown emphasis and punctuation allowed)
_FINAL_HEADING = re.compile(
    r"^[#*_>\s]*final(?:[ \t]+(?:version|code|module|answer|solution|kernel|file|"
    r"implementation|problem))?[\s*_:.]*$",
    re.IGNORECASE,
)
#: where unfenced code may start after prose
_CODE_START = re.compile(r"^(?:import |from \S+ import |class |def |async def |@|\"\"\"|''')")
_ALWAYS_BOUND = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__",
                                             "__package__", "__loader__", "__builtins__"}


class NoCodeError(KgenError, ValueError):
    """The reply holds no usable module; the message says why in a few words."""


@dataclass(frozen=True)
class ModuleShape:
    """What a complete module defines at top level, and how a reason names it."""

    label: str
    classes: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.classes + self.functions

    def missing(self, tree: ast.Module) -> list[str]:
        """The required names ``tree`` does not define at top level; a placeholder class (a
        skeleton whose body is only ``pass``, ``...`` or a docstring) does not count."""
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and not _placeholder(n)}
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        return [c for c in self.classes if c not in classes] + [f for f in self.functions if f not in functions]

    def mentioned_in(self, code: str) -> bool:
        """The code tries to define one of the names (at any indentation): the block meant as
        the module, whose fault is then the reason given."""
        return any(re.search(rf"^[ \t]*(?:async[ \t]+)?(?:class|def)[ \t]+{name}\b", code, re.MULTILINE)
                   for name in self.names)


def _placeholder(node: ast.ClassDef) -> bool:
    return all(isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
               for stmt in node.body)


#: a kernel candidate (KernelBench's convention)
CANDIDATE = ModuleShape(label="ModelNew", classes=("ModelNew",))
#: a problem file (KernelBench format): the reference model and its inputs
REFERENCE_PROBLEM = ModuleShape(label="class Model and get_inputs()", classes=("Model",),
                                functions=("get_inputs",))


@dataclass(frozen=True)
class _Block:
    tag: str
    code: str
    marked_final: bool
    closed: bool
    tree: ast.Module | None = field(compare=False)
    #: "line N: message" when the code does not parse
    error: str | None = field(compare=False)

    @property
    def is_python(self) -> bool:
        return self.tag in _PYTHON_TAGS or not self.tag


def _parse(code: str) -> tuple[ast.Module | None, str | None]:
    """(tree, None) when ``code`` parses; else (None, "line N: message")."""
    try:
        return ast.parse(code), None
    except SyntaxError as exc:
        return None, f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:  # e.g. null bytes
        return None, str(exc)


def _block(tag: str, info: str, code: str, line_before: str, closed: bool) -> _Block:
    first = next((line.strip() for line in code.split("\n") if line.strip()), "")
    marked = bool(_FINAL_WORD.search(info) or _FINAL_COMMENT.match(first)
                  or _FINAL_HEADING.match(line_before.strip()))
    tree, error = _parse(code)
    return _Block(tag=tag, code=code, marked_final=marked, closed=closed, tree=tree, error=error)


def _fenced_blocks(text: str) -> list[_Block]:
    """Every non-empty fenced block, in order; an unclosed last fence runs to the end (a
    cut-off reply)."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        line_before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        fence = opening.group("fence")
        info = opening.group("info").strip()
        words = info.split()
        # the language word only: ```python:kernel.py, ```{.python}
        tag = re.match(r"[a-z0-9_+-]*", words[0].lower().lstrip(".{")).group(0) if words else ""
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        closed = i < len(lines)
        i += 1  # past the closing fence
        code = textwrap.dedent("\n".join(body)).strip("\n")
        if code.strip():
            blocks.append(_block(tag, info, code, line_before, closed))
    return blocks


def _names(tree: ast.Module) -> tuple[set[str], set[str] | None]:
    """(names read, names bound) anywhere in the module; bound is None after ``import *``
    (anything may be bound). Scopes are ignored: this asks "could these blocks together be
    the whole file?", not "does every function run?"."""
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            if node.name == "*":
                return read, None
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif (name := getattr(node, "name", None)) and type(node).__name__ in ("TypeVar", "ParamSpec",
                                                                                 "TypeVarTuple"):
            bound.add(name)
    return read, bound


def _unbound(tree: ast.Module) -> set[str]:
    """Names the module reads but binds nowhere (and are not builtins): what it needs from
    another block."""
    read, bound = _names(tree)
    if bound is None:
        return set()
    return read - bound - _ALWAYS_BOUND


def _is_definitions(block: _Block, shape: ModuleShape) -> bool:
    """Imports, definitions and assignments only: safe to put before the module. A usage
    example (a bare call, or the module's own class used but not defined) is not."""
    assert block.tree is not None
    for node in block.tree.body:
        if isinstance(node, ast.Expr) and not (isinstance(node.value, ast.Constant)
                                               and isinstance(node.value.value, str)):
            return False
        if not isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef
                          | ast.ClassDef | ast.Assign | ast.AnnAssign | ast.Expr | ast.If | ast.Try):
            return False
    read, bound = _names(block.tree)
    return not any(name in read and (bound is None or name not in bound) for name in shape.names)


def _with_earlier_definitions(winner: _Block, earlier: list[_Block], shape: ModuleShape) -> str:
    """The winner, preceded by the earlier blocks that define names it reads but never binds."""
    assert winner.tree is not None
    parts = [winner]
    needed = _unbound(winner.tree)
    for block in reversed(earlier):
        if not needed:
            break
        if block.tree is None or not _is_definitions(block, shape):
            continue
        _, bound = _names(block.tree)
        if bound is None or bound & needed:
            parts.insert(0, block)
            joined, _ = _parse(_join(parts))
            needed = _unbound(joined) if joined is not None else set()
    return _join(parts)


def _join(blocks: list[_Block]) -> str:
    return "\n\n\n".join(b.code for b in blocks)


def _complete(block: _Block, shape: ModuleShape) -> bool:
    return block.tree is not None and not shape.missing(block.tree)


def _unfenced(text: str, shape: ModuleShape) -> str | None:
    """The reply, or its code from the first line of code to a paragraph break, when that is
    a complete module."""
    lines = text.split("\n")
    starts = [0] + [i for i, line in enumerate(lines) if _CODE_START.match(line)][:3]
    for start in dict.fromkeys(starts):
        ends = [len(lines)] + [i for i in range(len(lines) - 1, start, -1) if not lines[i].strip()]
        for end in ends:
            code = "\n".join(lines[start:end]).strip("\n")
            tree, _ = _parse(code)
            if code.strip() and tree is not None and not shape.missing(tree):
                return code
    return None


def _reason(code_blocks: list[_Block], shape: ModuleShape) -> str:
    """Why no block is a complete module, about the block most likely meant as the module."""
    attempts = [b for b in code_blocks if shape.mentioned_in(b.code)]
    if not attempts:
        return f"code block defines no {shape.label}"
    last = attempts[-1]
    if last.tree is None:
        return f"code does not parse: {last.error}"
    return f"code block defines no {', '.join(shape.missing(last.tree))} at module level"


def extract_module(reply_text: str, shape: ModuleShape) -> str:
    """The final complete module in ``reply_text`` (module doc), ending in one newline.

    Raises :class:`NoCodeError` with a short reason: no Python code block, no block defining
    the shape's names, or the code does not parse (with its line).
    """
    text = reply_text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = _fenced_blocks(text)
    code_blocks = [b for b in blocks if b.is_python or _complete(b, shape)]
    complete = [i for i, b in enumerate(code_blocks) if _complete(b, shape)]
    complete = [i for i in complete if code_blocks[i].closed] or complete
    if complete:
        marked = [i for i in complete if code_blocks[i].marked_final]
        index = (marked or complete)[-1]
        return _with_earlier_definitions(code_blocks[index], code_blocks[:index], shape) + "\n"
    if not code_blocks:
        whole = _unfenced(text, shape)
        if whole is not None:
            return whole + "\n"
        raise NoCodeError("reply has no python code block")
    raise NoCodeError(_reason(code_blocks, shape))


def extract_candidate(reply_text: str) -> str:
    """The candidate module (``class ModelNew``) in a model's reply; see the module doc."""
    return extract_module(reply_text, CANDIDATE)
