"""Export and import across stores and modes: every field round-trips, bad rows are skipped."""

from __future__ import annotations

import json

import pytest
from kb_entries import make_entry

from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.knowledge_base.seeding import open_knowledge_base
from kgen.knowledge_base.store import KnowledgeBase
from kgen.knowledge_base.transfer import export_knowledge_base, import_knowledge_base
from kgen.knowledge_base.write_back import record_kernel


def test_export_then_import_round_trips_every_field(kb_location, tmp_path):
    source = open_knowledge_base(str(tmp_path / "source"))
    record_kernel(source, make_entry(1, time_ms=3.0, model="anthropic:claude-sonnet-4-5"))
    on_mi300x = make_entry(2, target="mi300x")
    record_kernel(source, on_mi300x.model_copy(update={"timing": on_mi300x.timing.model_copy(
        update={"device_name": "AMD Instinct MI300X"})}))
    export = tmp_path / "kb.jsonl"
    report = export_knowledge_base(source, export)
    assert report.kernels == source.kernel_count() and report.guidance == len(source.guidance())

    destination = KnowledgeBase.open(kb_location)  # the other mode when kb_location is the server
    imported = import_knowledge_base(destination, export, verify=False)
    assert imported.bad_rows == [] and imported.kernels == report.kernels
    by_id = {e.id: e for e in destination.kernels()}
    for entry in source.kernels():
        assert by_id[entry.id] == entry  # every field, source included
    assert sorted(n.model_dump_json() for n in destination.guidance()) == sorted(
        n.model_dump_json() for n in source.guidance())
    # importing twice adds nothing
    import_knowledge_base(destination, export, verify=False)
    assert destination.kernel_count() == report.kernels


def test_bad_rows_are_reported_by_line_and_skipped_and_good_rows_imported(kb, tmp_path):
    good = make_entry(1)
    tampered = make_entry(2).model_dump(mode="json")
    tampered["source"] += "\n# changed after export\nx = 1\n"
    unknown_problem = make_entry(3, problem="not_a_problem").model_dump(mode="json")
    missing_field = make_entry(4).model_dump(mode="json")
    del missing_field["evidence"]
    untimed = make_entry(5, time_ms=None).model_dump(mode="json")
    lines = [
        json.dumps({"kind": "kgen-knowledge-base", "version": 1}),
        json.dumps({"kind": "kernel", **good.model_dump(mode="json")}),
        "{not json",
        json.dumps({"kind": "kernel", **tampered}),
        json.dumps({"kind": "kernel", **unknown_problem}),
        json.dumps({"kind": "kernel", **missing_field}),
        json.dumps({"kind": "mystery"}),
        json.dumps([1, 2]),
        json.dumps({"kind": "kernel", **good.model_dump(mode="json")}),
        json.dumps({"kind": "kernel", **untimed}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = import_knowledge_base(kb, path, verify=False)
    reasons = {row.line: row.reason for row in report.bad_rows}
    assert sorted(reasons) == [3, 4, 5, 6, 7, 8, 9, 10]
    assert reasons[10] == ("not measured: verified on cuda, never timed on a GPU: the knowledge base keeps a "
                           "kernel only with a timing on its target's GPU (h100)")
    assert reasons[9] == "repeats the kernel of line 2"
    assert "not JSON" in reasons[3]
    assert "code_hash does not match" in reasons[4]
    assert "unknown problem 'not_a_problem'" in reasons[5]
    assert "evidence" in reasons[6] and "Field required" in reasons[6]
    assert "unknown row kind 'mystery'" in reasons[7]
    assert [e.id for e in kb.kernels()] == [good.id]


def test_import_into_an_occupied_slot_keeps_one_best(kb, tmp_path):
    record_kernel(kb, make_entry(1, time_ms=2.0))
    other = KnowledgeBase.open(str(tmp_path / "other"))
    record_kernel(other, make_entry(2, time_ms=1.0))
    export_knowledge_base(other, tmp_path / "x.jsonl")
    import_knowledge_base(kb, tmp_path / "x.jsonl", verify=False)
    assert sorted((e.timing.time_ms, e.role) for e in kb.kernels()) == [(1.0, "best"), (2.0, "stepping_stone")]


@pytest.mark.slow
def test_import_reverifies_and_skips_a_kernel_that_fails(tmp_path):
    """A row whose kernel does not pass the verifier again is skipped; a real seed passes."""
    kb = KnowledgeBase.open(str(tmp_path / "kb"))
    seed = next(e for e in open_knowledge_base(str(tmp_path / "seeded")).kernels() if e.problem == "gelu")
    bad_source = (SEED_KERNELS_DIR / "triton" / "gelu.py").read_text().replace("tl.exp(-2.0 *", "tl.exp(-1.0 *")
    assert bad_source != seed.source
    from kgen.knowledge_base.code_hash import normalised_code_hash
    from kgen.knowledge_base.schema import kernel_id

    bad_hash = normalised_code_hash(bad_source)
    bad = seed.model_copy(update={"source": bad_source, "code_hash": bad_hash,
                                  "id": kernel_id(bad_hash, *seed.slot)})
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps({"kind": "kernel", **e.model_dump(mode="json")})
                              for e in (seed, bad)) + "\n")
    lines: list[str] = []
    report = import_knowledge_base(kb, path, verify=True, device="cpu", progress=lines.append)
    assert report.verified == 1 and report.kernels == 1
    assert [(r.line, r.reason.split(" (")[0]) for r in report.bad_rows] == [(2, "fails re-verification")]
    assert "numerical_mismatch" in report.bad_rows[0].reason
    assert [e.id for e in kb.kernels()] == [seed.id]
    assert len(lines) == 2 and lines[0].startswith("re-verifying 1/2: gelu")
