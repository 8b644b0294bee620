"""`kgen kb ...` as a person runs it, on a fresh $KGEN_HOME and on a loopback Chroma server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def kgen(home, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGEN_HOME": str(home), "COLUMNS": "120"}
    env.pop("KGEN_KB", None)
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _first_result_problem(stdout: str) -> str:
    row = next(line.split() for line in stdout.splitlines() if line.split()[:1] == ["1"])
    return row[2]  # rank, id, problem, backend, ...


def _shipped_seed_count() -> int:
    """Seed kernels with GPU evidence, over every backend (each evidence.json lists its own)."""
    from kgen.knowledge_base import SEED_KERNELS_DIR

    return sum(len(json.loads(f.read_text())) for f in SEED_KERNELS_DIR.glob("*/evidence.json"))


def test_init_then_search_finds_rmsnorm_backward_first(tmp_path):
    init = kgen(tmp_path, "kb", "init")
    assert init.returncode == 0, init.stderr
    shipped = _shipped_seed_count()
    assert shipped >= 15  # nine Triton and six CuTe DSL seeds
    assert f"{shipped} seed kernels added" in init.stdout and str(tmp_path / "kb") in init.stdout
    again = kgen(tmp_path, "kb", "init")
    assert f"0 seed kernels added, {shipped} already present" in again.stdout
    search = kgen(tmp_path, "kb", "search", "rms norm backward triton h100")
    assert search.returncode == 0, search.stderr
    assert _first_result_problem(search.stdout) == "rmsnorm_backward"


def test_the_same_commands_work_against_a_chroma_server(tmp_path, chroma_server):

    init = kgen(tmp_path, "kb", "init", "--kb", chroma_server)
    assert init.returncode == 0, init.stderr
    search = kgen(tmp_path, "kb", "search", "rms norm backward triton h100", "--kb", chroma_server)
    assert _first_result_problem(search.stdout) == "rmsnorm_backward"
    stats = json.loads(kgen(tmp_path, "kb", "stats", "--json", "--kb", chroma_server).stdout)
    assert stats["mode"] == "server" and stats["kernels"] >= 9
    assert not (tmp_path / "kb").exists()  # nothing local was created


def test_list_show_stats_on_first_use_seed_automatically(tmp_path):
    listed = kgen(tmp_path, "kb", "list", "--problem", "softmax", "--backend", "triton")
    assert listed.returncode == 0, listed.stderr
    kernel_id = next(w for w in listed.stdout.split() if w.startswith("k-"))
    shown = kgen(tmp_path, "kb", "show", kernel_id[:7])
    assert shown.returncode == 0
    assert "verified on cuda" in shown.stdout and "softmax" in shown.stdout and "@triton.jit" in shown.stdout
    entry = json.loads(kgen(tmp_path, "kb", "show", kernel_id, "--json").stdout)
    assert entry["id"].startswith(kernel_id) and entry["evidence"]["verdict"] == "passed"
    stats = json.loads(kgen(tmp_path, "kb", "stats", "--json").stdout)
    shipped = _shipped_seed_count()
    assert stats["kernels"] == shipped and stats["timed"] == shipped and stats["guidance"] >= 12
    cute = kgen(tmp_path, "kb", "list", "--problem", "softmax", "--backend", "cute")
    assert cute.returncode == 0 and "1 of 1 kernel." in cute.stdout
    cute_id = next(w for w in cute.stdout.split() if w.startswith("k-"))
    assert cute_id != kernel_id
    assert "@cute.kernel" in kgen(tmp_path, "kb", "show", cute_id).stdout


def test_export_import_prune_and_exit_codes(tmp_path):
    export = tmp_path / "out" / "kb.jsonl"
    out = kgen(tmp_path, "kb", "export", str(export))
    assert out.returncode == 0 and f"exported {_shipped_seed_count()} kernels" in out.stdout
    rows = export.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([rows[0], rows[1], "{oops"]) + "\n")
    other = tmp_path / "other-store"
    imported = kgen(tmp_path, "kb", "import", str(broken), "--no-verify", "--kb", str(other))
    assert imported.returncode == 1
    assert "skipped line 3: not JSON" in imported.stderr
    assert "imported 1 kernel (not re-verified: --no-verify)" in imported.stdout
    prune = kgen(tmp_path, "kb", "prune", "--dry-run")
    assert prune.returncode == 0 and "would remove 0 kernels" in prune.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("kb", "list", "--kb", "http://127.0.0.1:9"), "cannot reach the Chroma server at http://127.0.0.1:9"),
        (("kb", "show", "k-nope"), "no kernel with id 'k-nope'"),
        (("kb", "import", "missing.jsonl"), "import file not found: missing.jsonl"),
        (("kb", "search", "  "), "search text is empty"),
        (("kb", "search", "x", "--target", "h900"), "unknown hardware target 'h900'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = kgen(tmp_path, *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_corrupt_store_is_a_clear_error(tmp_path):
    store = tmp_path / "kb"
    store.mkdir()
    (store / "chroma.sqlite3").write_bytes(b"garbage" * 1000)
    out = kgen(tmp_path, "kb", "stats")
    assert out.returncode == 2
    assert "cannot be read" in out.stderr and "Traceback" not in out.stderr


def test_show_says_whether_a_kernel_keeps_its_evidence_bundle_and_prints_it(tmp_path):
    """Every seed ships with the bundle of its GPU verification: `kgen kb show` says so in a line
    and `--bundle` prints it intact for `kgen verify`; an entry stored without one says so
    (and `--bundle` is one error line, exit 2); one imported with a bundle prints that."""
    from kgen.evals.bundle import build_bundle, read_bundle
    from kgen.evals.harness import EvalOptions
    from kgen.evals.result import EvalResult
    from kgen.evals.verdict import StageResult, StageStatus, Verdict
    from kgen.knowledge_base.seeding import seed_entries

    export = tmp_path / "kb.jsonl"
    assert kgen(tmp_path, "kb", "export", str(export)).returncode == 0
    header, *rows = export.read_text().splitlines()
    kernels = [json.loads(line) for line in rows if json.loads(line)["kind"] == "kernel"]
    shipped = {e.id: e.bundle for e in seed_entries()}
    assert {r["id"] for r in kernels} == set(shipped)
    for row in kernels[:3]:
        seed = kgen(tmp_path, "kb", "show", row["id"], "--no-source")
        bundle = shipped[row["id"]]
        assert f"evidence bundle: passed on {bundle.device_name}, kgen {bundle.kgen_version}" in seed.stdout
        printed = kgen(tmp_path, "kb", "show", row["id"], "--bundle")
        assert printed.returncode == 0, printed.stderr
        (tmp_path / "seed_bundle.json").write_text(printed.stdout)
        assert read_bundle(tmp_path / "seed_bundle.json") == shipped[row["id"]]

    row = {k: v for k, v in kernels[0].items() if k != "bundle"}
    plain = tmp_path / "plain.jsonl"
    plain.write_text(header + "\n" + json.dumps(row) + "\n")
    bare = tmp_path / "bare-store"
    assert kgen(tmp_path, "kb", "import", str(plain), "--no-verify", "--kb", str(bare)).returncode == 0
    shown = kgen(tmp_path, "kb", "show", row["id"], "--no-source", "--kb", str(bare))
    assert "evidence bundle: none stored with this kernel" in shown.stdout
    refused = kgen(tmp_path, "kb", "show", row["id"], "--bundle", "--kb", str(bare))
    assert refused.returncode == 2 and f"kernel {row['id']} has no evidence bundle" in refused.stderr
    assert "`kgen kb init` adds them" in refused.stderr
    assert kgen(tmp_path, "kb", "init", "--kb", str(bare)).returncode == 0
    assert kgen(tmp_path, "kb", "show", row["id"], "--bundle", "--kb", str(bare)).returncode == 0

    result = EvalResult(problem=row["problem"], problem_path="p.py", candidate="k.py", backend=row["backend"],
                        device="cpu", verdict=Verdict.PASSED, kgen_version="1.2.3",
                        stages=[StageResult(name="correctness", status=StageStatus.PASSED,
                                            evidence={"seeds": [11, 12]})])
    bundle = build_bundle(result, EvalOptions(device="cpu"), row["source"], "class Model: ...\n", "k.py", "p.py")
    with_bundle = tmp_path / "with_bundle.jsonl"
    with_bundle.write_text(header + "\n" + json.dumps({**row, "bundle": json.loads(bundle.model_dump_json())}) + "\n")
    other = tmp_path / "other-store"
    assert kgen(tmp_path, "kb", "import", str(with_bundle), "--no-verify", "--kb", str(other)).returncode == 0
    shown = kgen(tmp_path, "kb", "show", row["id"], "--no-source", "--kb", str(other))
    assert (f"evidence bundle: passed on cpu, kgen 1.2.3, seeds [11, 12], sha256 {bundle.sha256[:16]}; re-check it: "
            f"kgen kb show {row['id']} --bundle > bundle.json && kgen verify bundle.json") in shown.stdout
    printed = kgen(tmp_path, "kb", "show", row["id"], "--bundle", "--kb", str(other))
    (tmp_path / "bundle.json").write_text(printed.stdout)
    assert read_bundle(tmp_path / "bundle.json") == bundle


@pytest.mark.slow
def test_an_offline_run_on_a_cpu_writes_no_unmeasured_kernel_and_says_why(tmp_path):
    """A KernelBench spelling served offline on a CPU is verified, never timed: it does not
    become the knowledge base's "best" for h100, and the run says so in one line."""
    from pathlib import Path

    softmax = Path(__file__).parents[2] / "fixtures" / "kernelbench" / "level1" / "23_Softmax.py"
    run = kgen(tmp_path, "run", "softmax", "--problem", str(softmax), "--budget", "1", "--device", "cpu",
               "--out", str(tmp_path / "run"))
    assert run.returncode == 0, run.stdout + run.stderr
    said = [line.split("s ", 1)[1] for line in run.stderr.splitlines() if "knowledge base: g0-c00" in line]
    assert said == ["knowledge base: g0-c00 not written for h100: verified on cpu, never timed on a GPU: the "
                    "knowledge base keeps a kernel only with a timing on its target's GPU (h100)"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best"]["h100"]["knowledge_base"].startswith("not written: verified on cpu")
    listed = kgen(tmp_path, "kb", "list", "--problem", "23_Softmax")
    assert listed.returncode == 0 and "0 of 0 kernels." in listed.stdout


def test_list_fits_80_columns_and_its_short_ids_open_the_kernel(tmp_path):
    """`kgen kb list` at COLUMNS=80 was 81 wide over the shipped kernels: ids are shown short
    (as git shows commits), and `kgen kb show` takes any unambiguous start of an id."""
    env = {**os.environ, "KGEN_HOME": str(tmp_path), "COLUMNS": "80"}
    env.pop("KGEN_KB", None)
    listed = subprocess.run([sys.executable, "-m", "kgen.cli", "kb", "list", "--limit", "100"], capture_output=True,
                            text=True, timeout=300, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, listed.stdout
    ids = [line.split()[0] for line in lines if line.startswith("k-")]
    assert len(ids) == _shipped_seed_count() and {len(i) for i in ids} == {12}
    shown = json.loads(kgen(tmp_path, "kb", "show", ids[0], "--json").stdout)
    assert shown["id"].startswith(ids[0]) and len(shown["id"]) == 18


def test_show_prints_the_worst_error_as_a_figure(tmp_path):
    """`kgen kb show` printed the error as Python's repr (9.727336300110218e-08)."""
    listed = kgen(tmp_path, "kb", "list", "--problem", "softmax", "--backend", "triton")
    kernel_id = next(w for w in listed.stdout.split() if w.startswith("k-"))
    shown = kgen(tmp_path, "kb", "show", kernel_id, "--no-source")
    assert "worst rel-L2 error 9.73e-08" in shown.stdout and "9.727336300110218e-08" not in shown.stdout
