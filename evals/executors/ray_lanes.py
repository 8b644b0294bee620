"""The Ray executor: a Ray cluster's GPUs, an actor each.

Each lane is a Ray actor that asks for one GPU, and for the GPU model the search targets
(Ray names every NVIDIA node's model as the resource ``accelerator_type:<model>``), so a
candidate for an H100 runs only where an H100 is. Inside, the actor is the same
``LaneRunner`` as a local lane: several verifiers on its GPU, each timed alone on it. Jobs
travel by value (``EvalJob`` carries the sources); results come back whole and name the
node's host and GPU. An actor that dies (its process killed, its node lost) is replaced and
its job tried once more elsewhere (``dispatch.py``); Ctrl-C or the end of kgen kills every
actor, and with it every verifier it started.

A CPU run (CI, a laptop) gets CPU lanes: actors that ask for one CPU each.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Sequence

from kgen.backends.device import Device
from kgen.backends.targets import resolve_target
from kgen.errors import KgenUsageError
from kgen.evals.executors.dispatch import LaneDispatcher, LaneHandle
from kgen.evals.executors.interface import Executor, LaneLost, OnResult, OnStart, Stop
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.lane import LaneRunner, default_slots, reply_to, result_of, side_by_side
from kgen.evals.placement import Placement, host_name
from kgen.evals.result import EvalResult

#: what Ray calls the resource naming a node's GPU model
ACCELERATOR_PREFIX = "accelerator_type:"
#: CPU lanes on a cluster without GPUs, unless ``gpus`` says how many
DEFAULT_CPU_LANES = 2
#: seconds an actor may wait for its GPU or CPU and start (it imports torch and kgen)
LANE_START_TIMEOUT_S = 180.0


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise KgenUsageError("--executor ray needs Ray on this machine and on every node: "
                             "pip install 'kgen[ray]'") from exc
    return ray


class LaneActor:
    """The actor's body (made a Ray actor class by :func:`_actor_class`)."""

    def __init__(self, lane: str, slots: int) -> None:
        import ray

        ids = ray.get_gpu_ids()
        index = int(ids[0]) if ids else None
        self.runner = LaneRunner(Placement(executor="ray", host=host_name(), lane=lane, gpu_index=index), slots,
                                 shares_files=False)

    def placement(self) -> dict:
        return self.runner.placement.model_dump(mode="json")

    def pid(self) -> int:
        return os.getpid()

    def run(self, message: dict) -> dict:
        return reply_to(self.runner, message)


_ACTOR = None


def _actor_class():
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = _ray().remote(LaneActor)
    return _ACTOR


class RayLane(LaneHandle):
    def __init__(self, name: str, slots: int, resources: dict, gpu: bool) -> None:
        ray = _ray()
        self.slots = slots
        options = {"max_concurrency": slots, "max_restarts": 0, "resources": resources}
        options.update({"num_gpus": 1, "num_cpus": 0} if gpu else {"num_cpus": 1})
        self._actor = _actor_class().options(**options).remote(name, slots)
        try:
            placement, self._pid = ray.get([self._actor.placement.remote(), self._actor.pid.remote()],
                                           timeout=LANE_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            wanted = ", ".join(f"{k} {v:g}" for k, v in {**resources, **(
                {"GPU": 1} if gpu else {"CPU": 1})}.items())
            raise KgenUsageError(f"lane {name} found no room on the Ray cluster in {LANE_START_TIMEOUT_S:g} s "
                                 f"(it asks for {wanted}: other work holds them); free them or pass a smaller "
                                 "--gpus") from exc
        self.placement = Placement.model_validate(placement).model_copy(
            update={"lane": f"{placement['host']}:{name}"})

    def pid(self) -> int:
        """The actor's process id on its node (asked once: a call now would queue behind its jobs)."""
        return self._pid

    def run(self, job: EvalJob, *, together: bool) -> EvalResult:
        ray = _ray()
        try:
            reply = ray.get(self._actor.run.remote({"job": job.model_dump(mode="json"), "together": together}))
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError) as exc:
            raise LaneLost(str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__) from exc
        result = job.as_asked(result_of(reply, job, self.placement))  # the caller's file names, not the node's copies
        if result.placement is not None:
            result.placement = result.placement.model_copy(update={"lane": self.placement.lane})
        return result

    def close(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            return  # the driver is gone: Ray ends the actors it started with it (and a kill now would crash)
        try:
            ray.kill(self._actor, no_restart=True)
        except Exception:  # already gone with its node, or Ray is shutting down
            pass


def lane_plan(cluster: dict[str, float], device: Device, targets: Sequence[str], gpus: int | None) -> tuple[int, dict]:
    """How many lanes, and the resources each asks for beside its GPU or CPU. ``cluster``:
    the resources free now (``ray.available_resources()``): lanes of another run, or anything
    else holding GPUs, are not counted as this run's."""
    if not device.is_gpu:
        cpus = int(cluster.get("CPU", 0))
        if cpus < 1:
            raise KgenUsageError("the Ray cluster has no free CPU to run CPU lanes on")
        return min(gpus or DEFAULT_CPU_LANES, cpus), {}
    models = {key[len(ACCELERATOR_PREFIX):]: value for key, value in cluster.items() if key.startswith(ACCELERATOR_PREFIX)}
    resources: dict = {}
    count = int(cluster.get("GPU", 0))
    if targets:
        target = resolve_target(targets[0])
        wanted = [m for m in models if _same_model(m, target.name)]
        if not wanted:
            have = ", ".join(sorted(models)) or "none named"
            raise KgenUsageError(f"the Ray cluster has no free {target.name} GPU (free GPU models: {have}); "
                                 "a candidate for a target is timed only on that target")
        resources = {ACCELERATOR_PREFIX + wanted[0]: 0.001}
        count = int(models[wanted[0]])
    if count < 1:
        raise KgenUsageError("the Ray cluster has no free GPU; use --device cpu for CPU lanes")
    if gpus is not None and gpus > count:
        raise KgenUsageError(f"--gpus {gpus}: the Ray cluster has {count} such GPU(s) free")
    return gpus or count, resources


def _same_model(ray_name: str, target: str) -> bool:
    """Ray's "H100" or "A100-80G" against kgen's target "h100" or "a100"."""
    return ray_name.lower().replace("-", "").startswith(target.lower().split("-")[0])


#: seconds to wait for a TCP connection to the cluster's address before saying it is unreachable
CONNECT_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """A HOST:PORT that nothing answers on is said at once: Ray itself retries for minutes."""
    import socket

    if address == "auto":
        return  # Ray finds the cluster of this machine, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise KgenUsageError(f"--ray-address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise KgenUsageError(f"could not reach a Ray cluster at {address!r}: {exc.strerror or exc} "
                             "(start one with `ray start --head`, or pass --ray-address HOST:PORT)") from exc


def connect(address: str | None):
    """Ray, connected as a driver to the cluster at ``address`` (None: RAY_ADDRESS, else
    "auto"); a usage error naming the address when that cannot be done."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise KgenUsageError(f"could not reach a Ray cluster at {address!r}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
                             "(start one with `ray start --head`, or pass --ray-address HOST:PORT)") from exc
    return ray


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, device: Device, address: str | None, targets: Sequence[str] = (), gpus: int | None = None,
                 slots: int | None = None, say: Callable[[str], None] | None = None) -> None:
        ray = connect(address)
        self.device = device
        # closed before Ray's own exit handler shuts the driver down (handlers run last-in first-out)
        atexit.register(self.close)
        count, resources = lane_plan(ray.available_resources(), device, targets, gpus)
        per_lane = slots or default_slots(device)
        gpu = device.is_gpu
        self._dispatcher = LaneDispatcher(
            lambda i: RayLane(f"{'gpu' if gpu else 'cpu'}{i}", per_lane, resources, gpu), count, say=say)

    def lanes(self) -> list[Placement]:
        return self._dispatcher.lanes()

    def capacity(self) -> int:
        return self._dispatcher.capacity()

    def handles(self) -> list[LaneHandle]:
        return self._dispatcher.handles()

    def busy_handles(self) -> list[LaneHandle]:
        return self._dispatcher.busy_handles()

    def evaluate(self, jobs: Sequence[EvalJob], *, on_result: OnResult | None = None, stop: Stop | None = None,
                 on_start: OnStart | None = None, together: bool | None = None) -> list[EvalResult]:
        if together is None:
            together = bool(jobs) and side_by_side(jobs[0].options, len(jobs), self.device)
        return self._dispatcher.evaluate(jobs, on_result or (lambda i, r: None), stop or (lambda: False),
                                         on_start or (lambda i: None), together=together)

    def close(self) -> None:
        self._dispatcher.close()
