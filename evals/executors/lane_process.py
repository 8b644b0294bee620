"""A lane in a process of its own: one GPU of this host, for the local executor.

``python -m kgen.evals.executors.lane_process --lane gpu1 --gpu-index 1 --slots 4`` (started
by ``local.py`` with ``CUDA_VISIBLE_DEVICES`` naming that one card). It speaks JSON lines:
jobs in on stdin (``{"id": 7, "together": true, "job": {...}}``), results out on the stdout it
was started with (``{"id": 7, "result": {...}}``, or ``"usage_error"``/``"error"``); its own
prints and warnings go to stderr, so nothing a library prints can corrupt a reply. Each lane
process runs its jobs through ``LaneRunner``: its verifiers' turns stop only its own
verifiers, i.e. only its own GPU's. It ends with its parent (the parent-death signal and a
watchdog), and its verifiers end with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

#: the first line a lane writes once it can take jobs
READY = "ready"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgen-lane")
    parser.add_argument("--lane", required=True)
    parser.add_argument("--gpu-index", type=int, default=None)
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--parent", type=int, default=None)
    args = parser.parse_args(argv)
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # whatever prints from here on goes to stderr, not into the replies

    from kgen.evals.executors.lane import LaneRunner, reply_to
    from kgen.evals.placement import Placement, host_name
    from kgen.evals.sandbox import lifecycle

    lifecycle.install_signal_handlers()  # SIGTERM from the parent ends this lane's verifiers too
    if args.parent is not None:
        lifecycle.start_parent_watchdog(args.parent)
    placement = Placement(executor="local", host=host_name(), lane=args.lane, gpu_index=args.gpu_index)
    runner = LaneRunner(placement, args.slots, shares_files=True)
    lock = threading.Lock()

    def reply(message: dict) -> None:
        with lock:
            replies.write(json.dumps(message) + "\n")

    def handle(message: dict) -> None:
        reply({"id": message["id"], **reply_to(runner, message)})

    reply({READY: placement.model_dump(mode="json")})
    with ThreadPoolExecutor(max_workers=args.slots, thread_name_prefix=f"kgen-{args.lane}") as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(handle, json.loads(line))
    runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
