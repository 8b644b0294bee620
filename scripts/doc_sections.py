"""Generated sections of a Markdown file, each between ``<!-- begin NAME -->`` / ``<!-- end NAME -->``.

Several scripts write their results into docs/verification.md; each owns its sections and
leaves the others as they were.
"""

from __future__ import annotations

import re
from pathlib import Path


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- begin {name} -->", f"<!-- end {name} -->"


def replace_section(path: Path, name: str, body: str) -> None:
    """Write ``body`` as section ``name`` of ``path``: in place if it exists, else appended."""
    begin, end = _markers(name)
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + ("\n\n" if text else "") + block
    path.write_text(text)


def sections(path: Path) -> str:
    """Every generated section of ``path``, as text to carry into a rewritten file."""
    if not path.exists():
        return ""
    found = re.findall(r"<!-- begin [^>]+ -->.*?<!-- end [^>]+ -->\n?", path.read_text(), re.S)
    return "".join(found)
