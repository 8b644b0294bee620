"""The store, in both modes: records round-trip, filters work, bad stores fail clearly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kb_entries import make_entry

from kgen.knowledge_base.store import KnowledgeBase, KnowledgeBaseError, where_equal


def test_put_get_round_trips_every_field(kb):
    entry = make_entry(1)
    kb.put_kernels([entry])
    assert kb.get_kernel(entry.id) == entry
    assert kb.get_kernel("k-missing") is None


def test_filters_and_counts(kb):
    kb.put_kernels([make_entry(1), make_entry(2, target="mi300x"), make_entry(3, problem="softmax")])
    assert kb.kernel_count() == 3
    assert {e.problem for e in kb.kernels(where_equal(target="h100"))} == {"rmsnorm_backward", "softmax"}
    only = kb.kernels(where_equal(problem="rmsnorm_backward", target="mi300x"))
    assert [e.target for e in only] == ["mi300x"]
    assert len(kb.kernels(limit=2)) == 2


def test_query_ranks_by_meaning(kb):
    kb.put_kernels([make_entry(1), make_entry(2, problem="softmax"), make_entry(3, problem="gelu")])
    ranked = kb.query_kernels("row softmax for hopper", n=3)
    assert ranked[0][0].problem == "softmax"
    assert ranked[0][1] > ranked[1][1]


def test_upsert_of_same_id_keeps_one_record(kb):
    entry = make_entry(1)
    kb.put_kernels([entry])
    kb.put_kernels([entry.model_copy(update={"role": "stepping_stone"})])
    assert kb.kernel_count() == 1
    assert kb.get_kernel(entry.id).role == "stepping_stone"


def test_prefix_lookup(kb):
    entry = make_entry(1)
    kb.put_kernels([entry])
    assert [e.id for e in kb.find_kernel_by_prefix(entry.id[:8])] == [entry.id]


def test_stats(kb):
    kb.put_kernels([make_entry(1), make_entry(2, target="mi300x", time_ms=None)])
    stats = kb.stats()
    assert (stats.kernels, stats.problems, stats.timed) == (2, 1, 1)
    assert stats.by_target == {"h100": 1, "mi300x": 1}
    assert stats.embedding == "kgen-hash/512"


def test_mismatched_embedding_is_refused_with_a_clear_message(kb_location):
    KnowledgeBase.open(kb_location).put_kernels([make_entry(1)])
    with pytest.raises(KnowledgeBaseError, match="built with the embedding 'kgen-hash/512'.*'kgen-hash/256'"):
        KnowledgeBase.open(kb_location, embedding="kgen-hash/256")


def test_embedded_store_is_seen_by_other_processes(tmp_path):
    location = str(tmp_path / "kb")
    KnowledgeBase.open(location).put_kernels([make_entry(1)])
    code = (
        "from kgen.knowledge_base.store import KnowledgeBase;"
        f"kb = KnowledgeBase.open({location!r});"
        "print(kb.kernel_count(), kb.query_kernels('rmsnorm backward', n=1)[0][0].problem)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "rmsnorm_backward"]


def test_corrupt_store_gives_a_clear_error(tmp_path):
    store = tmp_path / "kb"
    store.mkdir()
    (store / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(KnowledgeBaseError, match="cannot be read.*corrupt"):
        KnowledgeBase.open(str(store))


def test_store_path_that_is_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(KnowledgeBaseError, match="is a file, not a directory"):
        KnowledgeBase.open(str(path))


def test_unreachable_server_gives_a_clear_error():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(KnowledgeBaseError, match=f"cannot reach the Chroma server at http://127.0.0.1:{port}"):
        KnowledgeBase.open(f"http://127.0.0.1:{port}")


def test_locked_store_names_the_holder(tmp_path):
    location = str(tmp_path / "kb")
    kb = KnowledgeBase.open(location)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys,time;from kgen.knowledge_base.store import KnowledgeBase;"
         f"kb=KnowledgeBase.open({location!r});"
         "cm=kb.write_lock();cm.__enter__();print('locked',flush=True);time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(KnowledgeBaseError, match=f"locked by another kgen process \\(pid {holder.pid}\\)"):
            with kb.write_lock(timeout_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    with kb.write_lock(timeout_s=5):
        pass  # released when the holder died
