"""`kgen solve` over KernelBench files with a scripted model: the suite path on a GPU, no API key.

A loopback server speaking the OpenAI protocol (the test suite's, ``tests/support/llm_server.py``)
answers every request for a kernel with the solution kept for that problem in
``tests/fixtures/kernelbench_solutions/level1_<problem>.py`` (prose, no code, for a problem
without one), so `kgen solve` runs its real path (the openai SDK, verification, timing,
full-size verification of the winner, write-back, the fast_p table) on an unmodified
KernelBench folder. Used on the lent GPU for docs/benchmarks.md:

    python scripts/solve_with_scripted_model.py tests/fixtures/suite_level1 --out OUT -- --budget 1

Everything after ``--`` goes to `kgen solve`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "kernelbench_solutions"
PROBLEM_NAME = re.compile(r"kernel for `([^`]+)`")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path, help="folder of KernelBench level-1 files")
    parser.add_argument("--out", type=Path, required=True, help="kgen solve's --out")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.solve_args = argv[split + 1:]  # for kgen solve, untouched
    sys.path.insert(0, str(ROOT / "tests" / "agent"))
    from llm_server import RecordedRequest, Reply, ScriptedLLMServer

    def answer(request: RecordedRequest) -> Reply:
        prompt = "\n".join(str(m.get("content", "")) for m in request.messages)
        found = PROBLEM_NAME.search(prompt)
        solution = SOLUTIONS / f"level1_{found.group(1)}.py" if found else None
        if solution is None or not solution.is_file():
            return Reply.text("I cannot write this kernel.", input_tokens=500, output_tokens=10)
        return Reply.text(f"```python\n{solution.read_text()}```", input_tokens=2000, output_tokens=600)

    with ScriptedLLMServer() as server:
        server.respond_with("openai", answer)
        model = f"openai:scripted@{server.openai_base_url}"
        command = [sys.executable, "-m", "kgen.cli", "solve", str(args.suite), "--out", str(args.out),
                   "-m", model, *args.solve_args]
        print("$", " ".join(command), flush=True)
        code = subprocess.call(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        print(f"{len(server.requests)} model request(s) answered", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
