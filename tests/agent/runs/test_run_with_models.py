"""The agent end to end against loopback OpenAI and Anthropic servers, through the real SDKs.

Three generations of scripted replies: the run must reject the cheating and the
wrong kernel for the right reasons, survive a 429, a reply without code and
time-outs, account every token, keep keys out of its files, write the winner
to the knowledge base, and resume after being killed without paying twice or
re-running finished evaluations. On a GPU it must also pick the fast kernel
(on a CPU nothing is timed, so nothing can be called faster).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scripted_run
from llm_server import Reply

import kgen
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.store import KnowledgeBase


def _problem(tmp_path: Path) -> Path:
    path = tmp_path / "relu_16m.py"
    path.write_text(scripted_run.PROBLEM)
    return path


def run_scripted(tmp_path: Path, llm_server, device: str):
    tokens = scripted_run.script(llm_server, hang_s=scripted_run.HANG_S)
    lines: list[str] = []
    summary = kgen.generate(
        "Triton ReLU for H100", problem=_problem(tmp_path), models=scripted_run.models(llm_server),
        targets=["h100"], budget=7, generations=3, device=device, out=tmp_path / "run",
        kb=str(tmp_path / "kb"), progress=lines.append, llm_timeout_s=scripted_run.CALL_DEADLINE_S, llm_retries=1,
    )
    return summary, tokens, lines


@pytest.mark.slow
def test_three_generations_against_openai_and_anthropic(tmp_path, llm_server, home):
    summary, tokens, lines = run_scripted(tmp_path, llm_server, "cpu")
    run = Path(summary.run_dir)
    records = {c.name: json.loads((c / "task.json").read_text()) for c in (run / "candidates").iterdir()
               if (c / "task.json").is_file()}
    evals = {c.name: json.loads((c / "eval.json").read_text()) for c in (run / "candidates").iterdir()
             if (c / "eval.json").is_file()}
    # every model was asked: 3 candidates, then 2, then 2
    assert summary.candidates == 7 and sorted({r["generation"] for r in records.values()}) == [0, 1, 2]
    kinds = sorted(r["kind"] for r in records.values())
    # which operators get the later slots is the search policy's choice (recent success per
    # island; tests/agent/runs/test_scripted_lineage.py follows a crossover): here every model task
    # is one of them, and the rejected kernel is fixed
    assert {"generate", "improve", "fix"} <= set(kinds) <= {"generate", "improve", "fix", "crossover"}
    # the cheating and the wrong kernel are rejected for the right reasons
    by_source = {}
    for cid in evals:
        source = (run / "candidates" / cid / f"{cid}.py").read_text()
        by_source[normalised_code_hash(source)] = evals[cid]
    assert by_source[normalised_code_hash(scripted_run.CHEAT)]["rejection"] == "not_a_kernel"
    assert by_source[normalised_code_hash(scripted_run.WRONG)]["rejection"] == "numerical_mismatch"
    assert by_source[normalised_code_hash(scripted_run.SLOW)]["verdict"] == "passed"
    assert by_source[normalised_code_hash(scripted_run.FAST)]["verdict"] == "passed"
    assert summary.rejected == {"not_a_kernel": 1, "numerical_mismatch": 1}
    # a prose-only reply and a model that keeps timing out give no code, and the run goes on
    assert summary.no_code == 2
    no_code = [line for line in lines if "no code" in line]
    assert any("no python code block" in line or "no code block" in line for line in no_code)
    assert any("timeout" in line for line in no_code)
    # the 429 was retried by the SDK: openai saw one request more than it answered with text;
    # the hanging attempt used up its call's deadline, so it was not retried
    assert len(llm_server.requests_for("openai")) == 1 + 2 + 1 + 1
    assert len(llm_server.requests_for("anthropic")) == 3
    # every prompt and reply is on disk; improve prompts carry the parent, fix prompts the rejection
    for cid, record in records.items():
        if record["origin"] == "model":
            assert (run / "candidates" / cid / "prompt.md").is_file()
    fix = next(cid for cid, r in records.items() if r["kind"] == "fix" and r["generation"] == 1)
    fixed = records[fix]["parent_ids"][0]
    fix_prompt = (run / "candidates" / fix / "prompt.md").read_text()
    assert evals[fixed]["rejection"] in fix_prompt
    assert (run / "candidates" / fixed / f"{fixed}.py").read_text().strip()[:200] in fix_prompt
    # tokens and calls are accounted per model
    usage = summary.usage["models"]
    openai_label, anthropic_label = scripted_run.models(llm_server)
    assert usage[openai_label]["input_tokens"] + usage[openai_label]["output_tokens"] == tokens["openai"]
    assert usage[anthropic_label]["input_tokens"] + usage[anthropic_label]["output_tokens"] == tokens["anthropic"]
    assert usage[openai_label]["calls"] == 3 and usage[anthropic_label]["calls"] == 3
    assert json.loads((run / "usage.json").read_text())["total_tokens"] == sum(tokens.values())
    # keys reached the servers and nothing on disk
    assert any(scripted_run.OPENAI_KEY in str(r.headers) for r in llm_server.requests_for("openai"))
    assert any(scripted_run.ANTHROPIC_KEY in str(r.headers) for r in llm_server.requests_for("anthropic"))
    written = scripted_run.files_text(run) + "\n".join(lines)
    assert scripted_run.OPENAI_KEY not in written and scripted_run.ANTHROPIC_KEY not in written
    # a verified winner; verified on the CPU only, it is not written to the knowledge base
    best = summary.best["h100"]
    assert best.evidence.trials >= 3 and best.timing_note == "not timed: no GPU here"
    assert any("h100" in line for line in best.compile_report)
    module = Path(best.module).read_text()
    assert normalised_code_hash(module) in {normalised_code_hash(scripted_run.SLOW),
                                            normalised_code_hash(scripted_run.FAST)}
    stored = KnowledgeBase.open(str(tmp_path / "kb")).kernels()
    assert [e for e in stored if e.problem == "relu_16m"] == []
    assert best.knowledge_base.startswith("not written: verified on cpu, never timed on a GPU")


def test_model_reads_the_request_and_a_model_without_code_is_one_clear_error(tmp_path, llm_server, home):
    llm_server.script("openai", [
        Reply.text(json.dumps({"problem": "mean_dim", "operation": "mean over one axis", "backend": "triton",
                               "targets": ["h100"], "dtypes": [], "shapes": {}})),
        Reply.text("Sorry, I cannot help with that."),
        Reply.text("Still no code."),
    ])
    with pytest.raises(kgen.KgenUsageError, match="no model returned code in 2 request"):
        kgen.generate("the average over one axis thing", models=[f"openai:m@{llm_server.openai_base_url}"],
                      budget=2, generations=1, device="cpu", out=tmp_path / "run", kb=str(tmp_path / "kb"))
    spec = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert spec["problem"] == "mean_dim" and spec["source"] == "model"


def test_bad_key_and_unreachable_server_are_one_line_exit_2(tmp_path, llm_server, home):
    llm_server.script("openai", [Reply.error(401, "invalid api key")])

    def kgen_cli(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "KGEN_HOME": str(home)}
        return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    bad_key = kgen_cli("Triton softmax for H100", "-m", f"openai:m@{llm_server.openai_base_url}",
                       "--device", "cpu", "--kb", str(tmp_path / "kb"))
    assert bad_key.returncode == 2, bad_key.stderr
    error_lines = [line for line in bad_key.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "Traceback" not in bad_key.stderr
    assert scripted_run.OPENAI_KEY not in bad_key.stderr + bad_key.stdout
    unreachable = kgen_cli("Triton softmax for H100", "-m", "openai:m@http://127.0.0.1:9/v1",
                           "--device", "cpu", "--kb", str(tmp_path / "kb"))
    assert unreachable.returncode == 2 and "Traceback" not in unreachable.stderr
    assert "127.0.0.1:9" in unreachable.stderr


@pytest.mark.slow
def test_killed_run_resumes_without_paying_twice_or_re_evaluating(tmp_path, llm_server, home):
    scripted_run.script(llm_server)
    problem = _problem(tmp_path)
    out = tmp_path / "run"
    env = {**os.environ, "KGEN_HOME": str(home)}
    args = ["Triton ReLU for H100", "--problem", str(problem), "--target", "h100", "--budget", "7",
            "--generations", "3", "--device", "cpu", "--out", str(out), "--kb", str(tmp_path / "kb")]
    for model in scripted_run.models(llm_server):
        args += ["-m", model]
    process = subprocess.Popen([sys.executable, "-m", "kgen.cli", *args], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = out / "events.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        text = events.read_text() if events.is_file() else ""
        if "g0-c01: " in text:
            break
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = events.read_text()
    assert "run finished" not in before
    evaluated_before = {line.split()[2] for line in before.splitlines() if " evaluating " in line
                        and (out / "candidates" / line.split()[2] / "eval.json").is_file()}
    asked_before = len(llm_server.requests)

    resumed = subprocess.run([sys.executable, "-m", "kgen.cli", "resume", str(out), "--json"], env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["candidates"] == 7 and "h100" in summary["best"]
    after = events.read_text()
    for cid in evaluated_before:
        assert after.count(f"evaluating {cid} ") == 1, f"{cid} was evaluated again after resuming"
    # generation 0's replies were on disk: the resumed run asked only for later generations
    assert len(llm_server.requests) - asked_before <= 7 - 3


@pytest.mark.gpu
def test_on_a_gpu_the_fast_correct_kernel_is_selected_and_written_back(tmp_path, llm_server, home):
    import torch

    from kgen.agent.run_options import local_target

    if not torch.cuda.is_available() or local_target() is None:
        pytest.skip("needs a CUDA GPU kgen knows as a target")
    target = local_target()
    tokens = scripted_run.script(llm_server, hang_s=scripted_run.HANG_S)
    summary = kgen.generate(
        f"Triton ReLU for {target}", problem=_problem(tmp_path), models=scripted_run.models(llm_server),
        targets=[target], budget=7, generations=3, device="cuda", out=tmp_path / "run",
        kb=str(tmp_path / "kb"), llm_timeout_s=scripted_run.CALL_DEADLINE_S, llm_retries=1,
    )
    run = Path(summary.run_dir)
    times = {}
    for folder in (run / "candidates").iterdir():
        if (folder / "eval.json").is_file():
            result = json.loads((folder / "eval.json").read_text())
            if result["verdict"] == "passed":
                source = (folder / f"{folder.name}.py").read_text()
                times[normalised_code_hash(source)] = result["bench"]["measurements"]["candidate"]["median_ms"]
    fast, slow = normalised_code_hash(scripted_run.FAST), normalised_code_hash(scripted_run.SLOW)
    assert times[fast] < times[slow]
    best = summary.best[target]
    assert normalised_code_hash(Path(best.module).read_text()) == fast
    assert best.time_ms is not None and best.timing_note == ""
    stored = [e for e in KnowledgeBase.open(str(tmp_path / "kb")).kernels() if e.problem == "relu_16m"]
    assert len(stored) == 1 and stored[0].code_hash == fast and stored[0].timing.measured
    assert summary.usage["total_tokens"] == sum(tokens.values())
    print(f"GPU scripted run on {target}: fast {times[fast]:.4f} ms, slow {times[slow]:.4f} ms, "
          f"winner {best.candidate} {best.time_ms:.4f} ms, {best.speedup_vs_compile} x vs compile")
