"""The shipped guidance notes: well-formed, about known targets, covering every target."""

from __future__ import annotations

import pytest

from kgen.backends.targets import all_targets
from kgen.knowledge_base.guidance import (
    GUIDANCE_DIR,
    GuidanceFormatError,
    parse_note,
    shipped_notes,
)


def test_every_shipped_note_parses_and_names_known_targets_and_backends():
    notes = shipped_notes()
    assert len(notes) >= 12
    known = {t.name for t in all_targets()} | {"all"}
    for note in notes:
        assert (GUIDANCE_DIR / f"{note.id}.md").is_file(), f"{note.id}: id differs from file name"
        assert set(note.targets) <= known, note.id
        assert set(note.backends) <= {"triton", "cute", "all"}, note.id
        assert len(note.text.split()) >= 100, f"{note.id}: too short to help"


def test_every_target_and_backend_has_specific_guidance():
    notes = shipped_notes()
    for target in all_targets():
        assert any(target.name in n.targets for n in notes), f"no note written for {target.name}"
    assert any("cute" in n.backends for n in notes)
    rules = [n for n in notes if "verification" in n.topics and "all" in n.targets]
    assert rules, "the anti-cheating rules must apply to every target"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter", "must start with"),
        ("---\nid: x\n", "not closed"),
        ("---\nid: x\ntitle: t\n---\nbody", "lacks backends, targets"),
        ("---\nid x\n---\nbody", "expected 'key: value'"),
        ("---\nid: x\ntitle: t\nbackends: all\ntargets: all\n---\n", "no text"),
    ],
)
def test_malformed_notes_are_errors(text, message):
    with pytest.raises(GuidanceFormatError, match=message):
        parse_note(text, "bad.md")


def test_duplicate_ids_are_refused(tmp_path):
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("---\nid: same\ntitle: t\nbackends: all\ntargets: all\n---\nbody\n")
    with pytest.raises(GuidanceFormatError, match="duplicate guidance ids: same"):
        shipped_notes(tmp_path)
