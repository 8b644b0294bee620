"""Guidance notes: hardware, backend and correctness advice kept as Markdown files.

Notes live in ``knowledge_base/guidance/*.md`` so they are reviewed like
documentation; each opens with a small front matter of ``key: value`` lines
(``id``, ``title``, ``backends``, ``targets``, ``topics``; lists comma-separated,
``all`` for any) that retrieval filters on.
"""

from __future__ import annotations

from pathlib import Path

from kgen.errors import KgenError
from kgen.knowledge_base.schema import GuidanceNote

GUIDANCE_DIR = Path(__file__).resolve().parent / "guidance"
_REQUIRED = ("id", "title", "backends", "targets")


class GuidanceFormatError(KgenError, ValueError):
    """A guidance file whose front matter is missing or malformed."""


def parse_note(text: str, origin: str = "<text>") -> GuidanceNote:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise GuidanceFormatError(f"{origin}: must start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration as exc:
        raise GuidanceFormatError(f"{origin}: front matter is not closed by '---'") from exc
    fields: dict[str, str] = {}
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise GuidanceFormatError(f"{origin}:{number}: expected 'key: value', got {line!r}")
        fields[key.strip()] = value.strip()
    missing = [key for key in _REQUIRED if not fields.get(key)]
    if missing:
        raise GuidanceFormatError(f"{origin}: front matter lacks {', '.join(missing)}")
    body = "\n".join(lines[end + 1 :]).strip()
    if not body:
        raise GuidanceFormatError(f"{origin}: the note has no text")

    def listed(key: str) -> list[str]:
        return [item.strip().lower() for item in fields.get(key, "").split(",") if item.strip()]

    return GuidanceNote(
        id=fields["id"], title=fields["title"], backends=listed("backends"),
        targets=listed("targets"), topics=listed("topics"), text=body,
    )


def shipped_notes(directory: Path = GUIDANCE_DIR) -> list[GuidanceNote]:
    """Every shipped note, sorted by id; a malformed file is an error, never silently skipped."""
    notes = [parse_note(path.read_text(), path.name) for path in sorted(directory.glob("*.md"))]
    ids = [note.id for note in notes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise GuidanceFormatError(f"duplicate guidance ids: {', '.join(duplicates)}")
    return sorted(notes, key=lambda note: note.id)
