"""The agent as a LangGraph graph: spec -> retrieve -> plan -> produce (fan-out) -> evaluate
-> select -> (next generation | persist) -> report.

The graph's state is typed models (``state.py``: the spec, the planned tasks, each
candidate's record, the archive, token usage), checkpointed to SQLite after every step,
so ``kgen resume`` continues a killed run. Work that is expensive or costs
money is also kept on disk per candidate — a model's reply, an evaluation's
JSON — and reused on resume, so a resumed run neither pays twice for a reply
nor re-runs a finished evaluation, even if it was killed inside a step.

Candidates are produced in parallel (``Send`` per task: model calls overlap) and
evaluated as one batch per target (``evals/batch.py``): on a GPU verified several at a
time, each timed alone on the GPU (the others stopped meanwhile) by the process that
verified it, because timings taken while another kernel runs on the same GPU would be
wrong; on a CPU one after another. The report step is the caller's
(``build_graph``'s ``report``): the run's outputs are the runs room's, above this one.
"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgen.agent.candidates import (
    CandidateRecord,
    CandidateTask,
    apply_result,
    best_for,
    describe,
    entry_for_candidate,
)
from kgen.agent.llm.code_extraction import NoCodeError, extract_candidate
from kgen.agent.llm.ensemble import Ensemble
from kgen.agent.llm.model_calls import IN_FLIGHT, RecordedClient
from kgen.agent.llm.models import parse_model
from kgen.agent.llm.prompt_context import PromptExample, PromptGuidance, render_system, task_prompt
from kgen.agent.llm.providers import RUN_END_GRACE_S, ProviderError, make_client
from kgen.agent.llm.structured_output import complete_json
from kgen.agent.llm.usage import UsageLedger
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import CPU_OFFLINE_VARIANTS, RunOptions, local_target
from kgen.agent.search.archive import SearchArchive
from kgen.agent.search.final_verification import FinalVerifier
from kgen.agent.search.operators import operator_stats
from kgen.agent.search.policy import plan_generation, split_budget, stop_reason
from kgen.agent.search.state import RunState, TaskInput, Winner, open_checkpointer
from kgen.agent.search.verification_overlap import is_last_generation
from kgen.agent.spec.catalog_matcher import parse_request
from kgen.agent.spec.model_reader import parse_request_with_model
from kgen.agent.spec.reference_problem import ReferenceProblemError, new_reference_problem
from kgen.backends.device import Device, resolve_device
from kgen.backends.registry import get_backend, require_usable
from kgen.backends.targets import DEFAULT_TARGET, resolve_target
from kgen.core.text import counted
from kgen.errors import KgenUsageError
from kgen.evals.batch import evaluate_batch
from kgen.evals.executors.session import ExecutorChoice, choose
from kgen.evals.harness import EvalOptions
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import ProblemError, input_dtype
from kgen.evals.sandbox.lifecycle import raise_if_ending
from kgen.knowledge_base.errors import KnowledgeBaseError

if TYPE_CHECKING:
    from kgen.agent.llm.model_calls import RecordedClient
    from kgen.agent.spec.kernel_spec import KernelSpec
    from kgen.evals.harness import EvalOptions
    from kgen.evals.result import EvalResult

Progress = Callable[[str], None]
#: what the graph's last step does with the final state: write the run's outputs
Report = Callable[[RunState], None]


class RunError(KgenUsageError):
    """A run that cannot go on for a reason the user can fix (bad request, key, server)."""


class _NoSpecReply(Exception):
    """The model gave no usable reading of the request (the matcher reads it instead)."""


def usable_backend(backend: str, targets: list[str]) -> dict:
    """The run's backend and targets by their canonical names, or a usage error a person can
    act on: an unknown backend (listing the known ones), its toolchain not installed (naming
    the install command), or a target it cannot compile for (naming those it can)."""

    hardware = list({resolve_target(t).name: resolve_target(t) for t in targets}.values())
    name = require_usable(backend, hardware)
    resolved = [t.name for t in hardware]
    return {"backend": name, "targets": resolved}


def agent_eval_options(device: Device, backend: str, target: str, *, full: bool, train_check: bool,
                       timeout_s: float, run_path: Path, precision: str | None = None,
                       torch_ops: str | None = None):
    """How the agent evaluates a candidate: on a GPU, candidates are screened at the small size
    plan and timed, and the winner is then verified at full sizes; on a CPU both plans are the
    small one. The run's policies (precision, torch ops; None: each problem's own) judge every
    candidate. ``scripts/eval_throughput.py`` measures exactly these options."""

    return EvalOptions(
        device=device,
        backend=backend,
        targets=[target],
        small_sizes=device.is_gpu and not full,
        n_seeds=3 if full else 2,
        bench=device.is_gpu,
        train_check=train_check and full,
        timeout_s=timeout_s,
        precision=precision,
        torch_ops=torch_ops,
        baseline_cache_dir=str(run_path / "baselines"),
        prestart=True,  # candidates are evaluated one after another: keep a verifier warm
    )


class Runner:
    """The nodes of the graph, bound to one run directory and its options."""

    def __init__(self, run: RunDirectory, options: RunOptions, progress: Progress | None = None,
                 api_keys: dict[str, str] | None = None) -> None:
        self.run = run
        self.options = options
        self.progress = progress or (lambda line: None)
        self.api_keys = api_keys or {}
        self.started = time.monotonic()
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()  # produce branches run in parallel threads
        self._device: Device | None = None
        self._spec_usage = UsageLedger()
        self._final: FinalVerifier | None = None
        choose(ExecutorChoice.of(options), say=self.say)  # where this run's evaluations go

    # -- helpers ---------------------------------------------------------------------

    def say(self, line: str) -> None:
        self.run.log(line)
        self.progress(line)

    @property
    def device(self) -> Device:
        """The run's device, resolved once (the first time a node needs it) and passed typed to
        every evaluation; "cuda" without a GPU stops the run with a usage error."""
        if self._device is None:
            self._device = resolve_device(self.options.device)
        return self._device

    def out_of_time(self) -> bool:
        """--time counts this process's wall time: a resumed run gets the whole limit again."""
        return self.options.time_s is not None and time.monotonic() - self.started > self.options.time_s

    def abandon_model_calls(self) -> int:
        """Let go of this run's model calls still waiting (the run is stopping): their threads
        end now instead of at their deadlines."""

        with self._clients_lock:
            clients = list(self._clients.values())
        return IN_FLIGHT.abandon(clients) if clients else 0

    def _client(self, label: str):
        # every call ends by its own deadline, and none outlives the run's --time by more than a grace
        not_after = None if self.options.time_s is None else self.started + self.options.time_s + RUN_END_GRACE_S
        with self._clients_lock:
            if label not in self._clients:
                spec = parse_model(label)
                try:
                    self._clients[label] = make_client(
                        spec, api_key=self.api_keys.get(spec.provider),
                        timeout_s=self.options.llm_timeout_s, max_retries=self.options.llm_retries,
                        not_after=not_after,
                    )
                except ProviderError as exc:
                    raise RunError(exc.message) from exc
            return self._clients[label]

    # -- spec ------------------------------------------------------------------------

    def spec(self, state: RunState) -> dict:
        options = self.options
        default = local_target() or DEFAULT_TARGET
        if options.problem_file:
            spec = parse_request(options.request, default_target=default, problem_file=options.problem_file)
        elif options.offline:
            spec = parse_request(options.request, default_target=default)
        else:
            # a model reads the request (checked against the catalog and the targets)
            try:
                spec = parse_request_with_model(options.request, self._complete_json, default_target=default)
            except _NoSpecReply as exc:
                spec = parse_request(options.request, default_target=default)
                spec.notes.insert(0, f"{exc}: the request was read by the matcher")
        if spec.needs_reference_problem:
            spec = spec.model_copy(update={"problem": str(self._write_reference_problem(spec.operation))})
        if options.targets:
            spec = spec.model_copy(update={"targets": list(options.targets)})
        if options.backend:
            spec = spec.model_copy(update={"backend": options.backend})
        spec = spec.model_copy(update=usable_backend(spec.backend, spec.targets))
        info = resolve_problem(spec.problem)
        dtype = spec.dtypes[0] if spec.dtypes else input_dtype(info)
        self.run.write("spec.json", spec.model_dump_json(indent=1))
        self.say(f"spec: {info.name} · {spec.backend} · targets {', '.join(spec.targets)} · {dtype}"
                 + (f" ({'; '.join(spec.notes)})" if spec.notes else ""))
        return {"spec": spec, "dtype": dtype, "generation": 0, "usage": self._spec_usage}

    def _recorded(self, label: str, folder: str) -> RecordedClient:
        """The one way a model is asked: counted in a ledger and saved under ``folder``
        (``model_calls.py``); the ledger goes into the run's usage with the node's update."""

        return RecordedClient(label, lambda: self._client(label), self.run, folder)

    def _complete_json(self, system: str, user: str, model_cls):
        client = self._recorded(self.options.models[0], "model_calls/spec")
        try:
            value, _ = complete_json(client, system, user, model_cls)
        except ProviderError as exc:
            if exc.kind in ("missing_key", "auth", "unreachable"):
                raise RunError(exc.message) from exc
            raise _NoSpecReply(exc.message) from exc
        finally:
            self._spec_usage.merge(client.ledger)
        return value

    def _write_reference_problem(self, operation: str) -> Path:
        client = self._recorded(self.options.models[0], "model_calls/reference_problem")

        def complete_text(system: str, user: str) -> str:
            try:
                return client.complete(system, user, max_tokens=8000, temperature=0.2).text
            except ProviderError as exc:
                raise RunError(exc.message) from exc

        self.say(f"'{operation}' is not in the catalog: asking {client.label} for a reference problem")
        try:
            path = new_reference_problem(operation, complete_text, self.run.path)
        except ReferenceProblemError as exc:
            raise RunError(f"the model's reference problem for '{operation}' failed its self-check: "
                           f"{'; '.join(exc.reasons)}") from exc
        finally:
            self._spec_usage.merge(client.ledger)
        self.say(f"reference problem written and self-checked: {path.name}")
        return path

    # -- retrieve --------------------------------------------------------------------

    def retrieve(self, state: RunState) -> dict:
        from kgen.knowledge_base.retrieval import retrieve
        from kgen.knowledge_base.seeding import open_knowledge_base

        spec = state.spec
        problem = resolve_problem(spec.problem).name
        try:
            kb = open_knowledge_base(self.options.kb, embedding=self.options.kb_embedding)
        except KnowledgeBaseError as exc:
            raise RunError(str(exc)) from exc
        baselines: dict[str, tuple[str, str]] = {}
        examples: dict[str, list[PromptExample]] = {}
        guidance: dict[str, list[PromptGuidance]] = {}
        for target in spec.targets:
            found = retrieve(kb, self.options.request, backend=spec.backend, target=target,
                             problem=problem, dtype=state.dtype)
            same = [r.entry for r in found.examples if r.entry.problem == problem]
            if same:
                baselines[target] = (same[0].id, same[0].source)
            examples[target] = [
                PromptExample(source=r.entry.source, problem=r.entry.problem, backend=r.entry.backend,
                              target=r.entry.target, description=r.entry.operation,
                              summary=r.entry.summary_line())
                for r in found.examples
            ]
            guidance[target] = [PromptGuidance(title=n.title, text=n.text) for n in found.guidance]
            self.say(f"knowledge base ({kb.location}): {counted(len(found.examples), 'example')}, "
                     f"{counted(len(found.guidance), 'guidance note')} for {target}"
                     + (f"; starting point {same[0].id}" if same else "; no kernel for this problem yet"))
        library: dict[str, list[tuple[str, str, str]]] = {}
        if self.options.offline and not baselines:
            library = self._library(kb, spec, state.dtype)
            baselines = {target: (kernels[0][0], kernels[0][1]) for target, kernels in library.items()}
        if self.options.offline and not baselines:
            from kgen.knowledge_base import UNVERIFIED_SEEDS_DIR

            waiting = UNVERIFIED_SEEDS_DIR / spec.backend / f"{problem}.py"
            raise RunError(
                f"offline mode (no model configured) tunes known kernels, and the knowledge base has "
                f"no {spec.backend} kernel for {problem}; configure a model (`kgen config`, "
                "KGEN_MODELS or --model), or verify your own kernel with `kgen eval`"
                + (f" (kgen ships one that waits for its GPU verification: `kgen eval {problem} {waiting} "
                   f"--backend {spec.backend} --device cuda`)" if waiting.is_file() else "")
            )
        return {"baselines": baselines, "library": library, "examples": examples, "guidance": guidance}

    def _library(self, kb, spec: KernelSpec, dtype: str) -> dict[str, list[tuple[str, str, str]]]:
        """Offline, for a problem the knowledge base holds no kernel of: per target the kernels
        of other problems whose reference computes this one's (``agent/spec/library_match.py``),
        each to be verified against this problem's reference; none where nothing matches."""
        from kgen.agent.spec.library_match import match_library

        info = resolve_problem(spec.problem)
        library: dict[str, list[tuple[str, str, str]]] = {}
        for target in spec.targets:
            try:
                match = match_library(info, kb, backend=spec.backend, target=target, dtype=dtype)
            except ProblemError as exc:
                raise RunError(str(exc)) from exc
            if not match.served:
                self.say(f"library: {match.reason}")
                return {}
            library[target] = [(k.kb_id, k.source, k.description()) for k in match.kernels]
            self.say(f"library: no kernel for {info.name}, but {', '.join(match.twins)} computes its reference: "
                     f"{counted(len(match.kernels), 'kernel')} to verify for {target}, then the one "
                     "that passes is tuned")
        return library

    # -- plan ------------------------------------------------------------------------

    def budget_plan(self, state: RunState) -> list[int]:
        """Candidates per generation. Generation 0 always has a slot for each target's known
        kernel (``retrieve`` found them; see ``split_budget``), even when that is the only
        slot: a run that knew a good kernel must never end with none."""
        options = self.options
        remeasures = len(state.baselines) + sum(len(kernels) - 1 for kernels in state.library.values())
        if options.offline and not self.device.is_gpu:
            if state.library:  # another problem's kernels: verified first, then the one that passed tuned
                tuned = min(CPU_OFFLINE_VARIANTS, options.budget - remeasures)
                return [remeasures] + ([tuned] if tuned > 0 else [])
            return [max(min(options.budget, CPU_OFFLINE_VARIANTS + 1), remeasures)]
        if state.library:
            return [remeasures] + split_budget(max(options.budget - remeasures, 0), max(options.generations - 1, 1))
        return split_budget(options.budget, options.generations, remeasures=remeasures)

    def plan(self, state: RunState) -> dict:
        generation = state.generation
        sizes = self.budget_plan(state)
        records = state.records
        spec = state.spec
        if generation >= len(sizes):
            return {"tasks": []}
        sources = {r.id: self.run.candidate_source(r.id).read_text() for r in records
                   if self.run.candidate_source(r.id).is_file()}
        models = None
        if not self.options.offline:
            ensemble = Ensemble([parse_model(m) for m in self.options.models])
            models = lambda n: [m.label for m in ensemble.allocate(n)]  # noqa: E731
        tasks = plan_generation(generation, sizes[generation], spec.targets, records, sources, state.baselines,
                                self.archive(state), random.Random(f"{self.options.seed}-{generation}"),
                                models=models, backend=spec.backend, library=state.library)
        self.say(f"generation {generation}: {counted(len(tasks), 'candidate')} "
                 f"({', '.join(sorted({t.kind for t in tasks})) or 'none'})")
        if tasks and self.device.is_gpu and is_last_generation(generation, len(sizes)):
            self.final_verifier.start_beside(state, generation, screenings=len(tasks))
        only_remeasures = bool(tasks) and all(t.kind == "baseline" for t in tasks)
        if not self.options.offline and len(sizes) == 1 and only_remeasures:
            self.say(f"the budget ({self.options.budget}) is spent re-measuring "
                     f"{counted(len(tasks), 'known kernel')}: "
                     "no model is asked (raise --budget)")
        return {"tasks": tasks}

    def fan_out(self, state: RunState) -> str | list:
        """One ``Send`` to ``produce`` per planned task, or on to ``select`` when none was planned
        (LangGraph reads this method's hints: ``Send`` is imported only when it runs)."""
        from langgraph.types import Send

        if not state.tasks:
            return "select"
        return [
            Send("produce", TaskInput(
                task=task, spec=state.spec, dtype=state.dtype,
                examples=state.examples.get(task.target, []),
                guidance=state.guidance.get(task.target, []),
                parents={p: state.candidates[p] for p in task.parent_ids if p in state.candidates},
            ))
            for task in state.tasks
        ]

    # -- produce ---------------------------------------------------------------------

    def produce(self, payload: TaskInput) -> dict:
        task = payload.task
        record = CandidateRecord(**task.model_dump(exclude={"source"}))
        source_path = self.run.candidate_source(task.id)
        usage = UsageLedger()
        self.run.write(f"candidates/{task.id}/task.json", task.model_dump_json(indent=1, exclude={"source"}))
        if task.source is not None:
            source_path.parent.mkdir(parents=True, exist_ok=True)
            source_path.write_text(task.source)
        elif not source_path.is_file():
            source, reason, usage = self._ask_model(task, payload)
            if source is None:
                record.status, record.reason = "no_code", reason
                self.say(f"{task.id} ({task.model}, {task.kind}): no code: {reason}")
                return {"candidates": {task.id: record}, "usage": usage}
            source_path.parent.mkdir(parents=True, exist_ok=True)
            source_path.write_text(source)
        return {"candidates": {task.id: record}, "usage": usage}

    def _ask_model(self, task: CandidateTask, payload: TaskInput) -> tuple[str | None, str, UsageLedger]:
        # a reply paid for before an interruption is on disk: the recorded client reuses it
        client = self._recorded(task.model, f"candidates/{task.id}")
        system = render_system(payload.spec.backend)
        user = task_prompt(
            task, problem=payload.spec.problem, backend=payload.spec.backend, dtype=payload.dtype,
            examples=payload.examples, guidance=payload.guidance,
            descriptions={p: c.description for p, c in payload.parents.items()},
            read_source=lambda c: self.run.candidate_source(c).read_text(), load_eval=self.load_eval,
        )
        try:
            completion = client.complete(system, user, max_tokens=16000, temperature=0.7)
        except ProviderError as exc:
            if exc.kind in ("missing_key", "auth", "unreachable"):
                raise RunError(exc.message) from exc
            return None, f"{exc.kind}: {exc.message}", client.ledger
        reply = completion.text
        try:
            return extract_candidate(reply), "", client.ledger
        except NoCodeError as exc:
            return None, str(exc), client.ledger

    # -- evaluate --------------------------------------------------------------------

    def eval_options(self, spec: KernelSpec, target: str, *, full: bool,
                     rank_against_ms: float | None = None) -> EvalOptions:
        """The run's options for one target; ``rank_against_ms`` (the best candidate's median so
        far) lets a candidate's timing stop once it is clearly slower or faster than that."""
        options = agent_eval_options(
            self.device, spec.backend, target, full=full, train_check=self.options.train_check,
            timeout_s=self.options.eval_timeout_s, run_path=self.run.path,
            precision=self.options.precision, torch_ops=self.options.torch_ops,
        )
        # every candidate is cross-compiled for every target of the run: one made for H100 may
        # serve MI300X too (its archive takes it if it compiles there; timed only where present)
        return options.model_copy(update={"also_compile_for": [t for t in spec.targets if t != target],
                                          "rank_against_ms": rank_against_ms})

    @property
    def final_verifier(self) -> FinalVerifier:
        """The run's full-size verifications of its winners (made once the device is known)."""
        if self._final is None:
            self._final = FinalVerifier(self.run, self.device, lambda spec, target: self.eval_options(
                spec, target, full=True), self.say)
        return self._final

    def load_eval(self, candidate_id: str, name: str = "eval.json") -> EvalResult | None:
        return self.run.load_eval(candidate_id, name)

    def evaluate(self, state: RunState) -> dict:
        """Every pending candidate, as one batch (``evals/batch.py``: on a GPU verified side by
        side, each timed alone on the GPU by the verifier that verified it); each result is saved the moment it is known."""

        updates: dict[str, CandidateRecord] = {}
        pending = sorted((r for r in state.records if r.status == "pending"), key=lambda r: r.id)
        results = {r.id: result for r in pending if (result := self.load_eval(r.id)) is not None}
        for record in pending:
            if record.id in results:  # evaluated before the run was interrupted
                self.say(f"{record.id}: {describe(apply_result(record, results[record.id]))}")
        todo = [r for r in pending if r.id not in results]

        def announce(index: int) -> None:
            record = todo[index]
            self.say(f"evaluating {record.id} [{index + 1}/{len(todo)}] ({record.kind}"
                     f"{', ' + record.description if record.description else ''})")

        def save(index: int, result) -> None:
            if result.cut_short:  # kgen is stopping: a resumed run verifies it again
                return
            record = todo[index]
            self.run.write(f"candidates/{record.id}/eval.json", result.model_dump_json(indent=1))
            results[record.id] = result
            self.say(f"{record.id}: {describe(apply_result(record, result))}")

        for target in dict.fromkeys(r.target for r in todo):
            group = [i for i, r in enumerate(todo) if r.target == target]
            # candidates are timed against the best so far: a clearly slower one stops early
            best = best_for(state.records, target)
            best_ms = best[0].time_on(target) if best else None
            evaluate_batch(state.spec.problem, [self.run.candidate_source(todo[i].id) for i in group],
                           self.eval_options(state.spec, target, full=not self.device.is_gpu,
                                             rank_against_ms=best_ms),
                           on_result=lambda k, result, group=group: save(group[k], result), on_phase=self.say,
                           stop=self.out_of_time, on_start=lambda k, group=group: announce(group[k]))
        if left := sum(1 for r in todo if r.id not in results):
            self.say(f"time limit reached: {counted(left, 'candidate')} not evaluated")
        for record in pending:
            if record.id in results:
                updates[record.id] = apply_result(record, results[record.id])
        return {"candidates": updates}

    # -- select ----------------------------------------------------------------------

    def archive(self, state: RunState) -> SearchArchive:
        """The state's archive, as a copy this step may change (the state's stays as
        checkpointed), or a new one before the first generation was selected."""
        if state.archive is not None:
            return state.archive.model_copy(deep=True)
        return SearchArchive.new(state.spec.targets, self.options.islands)

    def _features(self, backend: str, record: CandidateRecord) -> dict[str, str]:
        path = self.run.candidate_source(record.id)
        return get_backend(backend).strategy_features(path.read_text()) if path.is_file() else {}

    def select(self, state: RunState) -> dict:
        records = state.records
        generation = state.generation
        archive = self.archive(state)
        backend = state.spec.backend
        for line in archive.update(records, lambda r: self._features(backend, r), generation):
            self.say(line)
        self.run.write("search.json", json.dumps({
            "archive": archive.model_dump(mode="json"),
            "operators": {k: v.model_dump(mode="json") for k, v in operator_stats(records).items()},
        }, indent=1))
        for target in state.spec.targets:
            best = best_for(records, target)
            if best:
                self.say(f"after generation {generation}, best for {target}: {best[0].id} ({describe(best[0])}; "
                         f"{counted(archive.targets[target].cell_count(), 'strategy')} in the archive)")
        stop = stop_reason(
            archive, self.options, generation=generation, planned_generations=len(self.budget_plan(state)),
            evaluated=len(records), out_of_time=self.out_of_time(), cost_usd=state.usage.total_cost_usd,
            cpu_offline=self.options.offline and not self.device.is_gpu,
        )
        if state.library and not any(r.passed for r in records):
            stop = (f"none of the library's {counted(len(records), 'kernel')} for {', '.join(state.library)} passed this "
                    "problem's verification: nothing to tune")
        if stop:
            self.say(f"stopping: {stop}")
            return {"archive": archive, "stop_reason": stop}
        return {"archive": archive, "generation": generation + 1, "tasks": []}

    def after_select(self, state: RunState) -> str:
        return "persist" if state.stop_reason else "plan"

    # -- persist ---------------------------------------------------------------------

    def persist(self, state: RunState) -> dict:
        """Verify each target's winner at full sizes (GPU) and write it to the knowledge base."""
        records = state.records
        winners: dict[str, Winner] = {}
        for target in state.spec.targets:
            for record in best_for(records, target, n=3):
                result = self.final_verifier.result(state.spec, record)
                if result.passed:
                    winners[target] = Winner(candidate=record.id,
                                             kb=self._write_back(state, record, result, target))
                    break
                self.say(f"{record.id} failed full verification "
                         f"({result.rejection.value if result.rejection else 'rejected'}): next best")
        return {"winners": winners}

    def _write_back(self, state: RunState, record: CandidateRecord, result: EvalResult, target: str) -> str:
        from kgen.knowledge_base.seeding import open_knowledge_base
        from kgen.knowledge_base.write_back import record_kernel

        if not self.options.persist:
            return "not written (--no-persist)"
        entry = entry_for_candidate(
            result, self.run.candidate_source(record.id).read_text(), record, run_id=self.run.run_id,
            spec_text=self.options.request, target=target, dtype=state.dtype,
            operation=state.spec.operation, shapes=state.spec.shapes, bundle=self.final_verifier.bundle(record.id),
        )
        try:
            outcome = record_kernel(open_knowledge_base(self.options.kb, embedding=self.options.kb_embedding), entry, generation_best=True)
        except KnowledgeBaseError as exc:
            self.say(f"could not write {record.id} to the knowledge base: {exc}")
            return f"not written: {exc}"
        if outcome.action == "not_measured":
            self.say(f"knowledge base: {record.id} not written for {target}: {outcome.reason}")
            return f"not written: {outcome.reason}"
        self.say(f"knowledge base: {outcome.action.replace('_', ' ')} {outcome.id} for {target}")
        return f"{outcome.action} {outcome.id}"


def _stops_when_kgen_does(node: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The node, after a check that no ending signal has come: one whose exception Python
    swallowed where it landed (``evals/sandbox/lifecycle.py``) still stops the run before its next step."""

    @functools.wraps(node)
    def checked(state: Any) -> Any:  # the run's state, or produce's task
        raise_if_ending()
        return node(state)

    return checked


def _reporting(report: Report) -> Callable[[RunState], dict]:
    """The report step: the caller's ``report`` on the final state, changing nothing in it."""

    def node(state: RunState) -> dict:
        report(state)
        return {}

    return node


def build_graph(runner: Runner, checkpointer: Any, report: Report):
    """The graph of ``runner``'s nodes; its last step hands the final state to ``report``
    (the run's outputs: ``runs/summary.py``), so a run killed while reporting reports on resume."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(RunState)
    for name in ("spec", "retrieve", "plan", "evaluate", "select", "persist"):
        graph.add_node(name, _stops_when_kgen_does(getattr(runner, name)))
    graph.add_node("produce", _stops_when_kgen_does(runner.produce), input_schema=TaskInput)
    graph.add_node("report", _stops_when_kgen_does(_reporting(report)))
    graph.add_edge(START, "spec")
    graph.add_edge("spec", "retrieve")
    graph.add_edge("retrieve", "plan")
    graph.add_conditional_edges("plan", runner.fan_out, ["produce", "select"])
    graph.add_edge("produce", "evaluate")
    graph.add_edge("evaluate", "select")
    graph.add_conditional_edges("select", runner.after_select, {"plan": "plan", "persist": "persist"})
    graph.add_edge("persist", "report")
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)


def execute(runner: Runner, report: Report, *, resume: bool = False) -> RunState:
    """Run (or continue) the graph to the end; the final state."""
    checkpointer, connection = open_checkpointer(runner.run)
    try:
        graph = build_graph(runner, checkpointer, report)
        config = {"configurable": {"thread_id": runner.run.run_id}, "recursion_limit": 500}
        if resume:
            snapshot = graph.get_state(config)
            if not snapshot.next:
                return RunState.model_validate(snapshot.values)  # finished already
            graph.invoke(None, config)
        else:
            graph.invoke(RunState(), config)
        return RunState.model_validate(graph.get_state(config).values)
    except BaseException:
        runner.abandon_model_calls()  # interrupted: parallel branches stop waiting on models now
        raise
    finally:
        connection.close()
