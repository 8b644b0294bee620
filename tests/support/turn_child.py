"""A stand-in verifier for the GPU-turn tests: it works (a counter in a file, advanced every
few milliseconds) and, when told, asks for a turn, holds it, and gives it back. Run as
``python -m tests.support.turn_child LOG SECONDS [turn]`` with the turn folder in
``KGEN_TEST_TURN_DIR``; each line of LOG is ``tick <time>`` or ``turn <start> <end>``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kgen.evals.sandbox.gpu_turns import await_turn, end_turn

TICK_S = 0.005


def main(argv: list[str]) -> int:
    log, seconds, wants_turn = Path(argv[0]), float(argv[1]), len(argv) > 2
    turn_dir = os.environ.get("KGEN_TEST_TURN_DIR")
    with log.open("a") as out:
        if wants_turn:
            await_turn(turn_dir)
            start = time.time()
            time.sleep(seconds)
            out.write(f"turn {start} {time.time()}\n")
            out.flush()
            end_turn(turn_dir)
            return 0
        for _ in range(int(seconds / TICK_S)):  # counted in ticks: a stopped child does none
            out.write(f"tick {time.time()}\n")
            out.flush()
            time.sleep(TICK_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
