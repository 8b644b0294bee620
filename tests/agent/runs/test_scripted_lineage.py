"""A scripted search lineage, end to end against a loopback OpenAI server.

The model answers by operator, as a model would: a slow correct kernel and a
wrong one when asked to generate, a faster rewrite when asked to improve, a
merge when asked to cross two parents, and the fast kernel when shown the
wrong one's rejection. The run must follow that lineage (improve the verified
kernel, cross the improvement with another parent, fix the rejection with the
verifier's evidence in the prompt) and the report must show it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import scripted_run
from llm_server import RecordedRequest, Reply

import kgen
from kgen.agent.runs.html_report import write_report

MID = scripted_run.SLOW.replace("CHUNK=16", "CHUNK=64").replace(
    "Correct but slow: each program walks 4096 elements sixteen at a time.",
    "Better: each program walks 4096 elements sixty-four at a time.")
MERGED = "# merged: one wide block per program, as in parent B\n" + scripted_run.FAST


class OperatorResponder:
    """Replies chosen by the task the prompt states; generate answers alternate."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generated = 0
        self.asked: list[str] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        prompt = "\n".join(str(m.get("content", "")) for m in request.messages)
        if "# Task: combine two verified" in prompt:
            kind, code = "crossover", MERGED
        elif "# Task: make a verified" in prompt:
            kind, code = "improve", MID
        elif "# Task: fix a rejected" in prompt:
            kind, code = "fix", scripted_run.FAST
        else:
            with self.lock:
                self.generated += 1
                kind, code = "generate", scripted_run.SLOW if self.generated == 1 else scripted_run.WRONG
        with self.lock:
            self.asked.append(kind)
        return Reply.text(scripted_run.fenced(code), input_tokens=1000, output_tokens=300)


@pytest.mark.slow
def test_the_search_follows_a_scripted_lineage_and_the_report_shows_it(tmp_path, llm_server, home):
    responder = OperatorResponder()
    llm_server.respond_with("openai", responder)
    problem = tmp_path / "relu_16m.py"
    problem.write_text(scripted_run.PROBLEM)
    summary = kgen.generate(
        "Triton ReLU for H100", problem=problem, models=[scripted_run.models(llm_server)[0]],
        targets=["h100"], budget=6, generations=3, device="cpu", out=tmp_path / "run",
        kb=str(tmp_path / "kb"), islands=1, plateau_generations=0,
    )
    run = Path(summary.run_dir)
    tasks = {c.name: json.loads((c / "task.json").read_text()) for c in (run / "candidates").iterdir()}
    evals = {c.name: json.loads((c / "eval.json").read_text()) for c in (run / "candidates").iterdir()
             if (c / "eval.json").is_file()}
    source = {cid: (run / "candidates" / cid / f"{cid}.py").read_text() for cid in tasks}
    by_code = {code: cid for cid, code in source.items()}
    slow, wrong = by_code[scripted_run.SLOW], by_code[scripted_run.WRONG]
    assert evals[slow]["verdict"] == "passed" and evals[wrong]["verdict"] == "rejected"

    # generation 1: the verified kernel is improved, the model's rejection is fixed
    improve = next(c for c, t in tasks.items() if t["kind"] == "improve" and t["generation"] == 1)
    fix = next(c for c, t in tasks.items() if t["kind"] == "fix")
    assert tasks[improve]["parent_ids"] == [slow] and source[improve] == MID
    assert tasks[fix]["parent_ids"] == [wrong]
    fix_prompt = (run / "candidates" / fix / "prompt.md").read_text()
    assert evals[wrong]["rejection"] in fix_prompt  # the verifier's evidence reached the model
    assert "outside the elementwise bound" in fix_prompt or "rel-L2" in fix_prompt
    assert scripted_run.WRONG.strip()[:200] in fix_prompt
    improve_prompt = (run / "candidates" / improve / "prompt.md").read_text()
    assert "CHUNK=16" in improve_prompt  # the parent's source, to be improved

    # generation 2: the improvement (nothing is timed on a CPU: the latest of its strategy leads
    # it) is crossed with another strategy's verified kernel
    cross = next(c for c, t in tasks.items() if t["kind"] == "crossover")
    assert tasks[cross]["generation"] == 2 and improve in tasks[cross]["parent_ids"]
    assert len(set(tasks[cross]["parent_ids"])) == 2
    assert all(evals[p]["verdict"] == "passed" for p in tasks[cross]["parent_ids"])
    assert {"generate", "improve", "fix", "crossover"} <= set(responder.asked)

    # the search's record: operators counted, the archive saved for the report and for resume
    search = json.loads((run / "search.json").read_text())
    assert {"generate", "improve", "fix", "crossover"} <= set(search["operators"])
    assert search["archive"]["targets"]["h100"]["seen"]

    # the report traces the crossover back through the improvement to the first kernel
    page = write_report(run, candidate=cross).read_text()
    focus = page[page.index('id="focus"'):]
    for cid in (cross, improve, slow):
        assert cid in focus
    assert "CHUNK=64" in focus and "CHUNK=16" in focus  # the improvement's diff
    assert focus.index(cross) < focus.index(improve) < focus.index(slow)
