"""Every model call of a run goes through one path: counted, saved, and paid for once.

A run's cost limit (``--max-cost``) and its ``usage.json`` are only as good as the count of
its calls, and an audit of a run is only as good as the prompts and replies kept in its
directory. When each caller did its own bookkeeping, one forgot: the call that writes a
reference problem for an operation outside the catalog was neither counted nor saved. So
the spec reading, the reference problem and every candidate ask through
:class:`RecordedClient`, which counts each completion in a :class:`UsageLedger` and writes
its prompt, reply and usage into the run directory before handing the reply back.

Every call being waited on is also on one board (:data:`IN_FLIGHT`, a :class:`ModelCall`
each: which model, for what, since when, until when), which the live status line reads so a
person sees which model a run is waiting on and for how long, and through which a call that
ran out of time is abandoned (``kgen.agent.llm.providers`` enforces the deadline).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from kgen.agent.llm.completion import Completer, Completion
from kgen.agent.llm.usage import UsageLedger

if TYPE_CHECKING:
    from kgen.agent.run_directory import RunDirectory


class ModelCall:
    """One model call being waited on: shown while it waits, abandoned at its deadline.

    ``started`` and ``deadline`` are ``time.monotonic()`` values; ``bound`` says what set the
    deadline: the call's own (``llm_timeout_s``) or the run's time limit, which came first.
    ``attempts`` counts the requests sent (the first and each retry).
    """

    def __init__(self, label: str, purpose: str, *, started: float, deadline: float,
                 bound: Literal["llm_timeout", "run_time"], owner: object = None) -> None:
        self.label = label
        #: the client making the call (``abandon`` picks a client's calls by it)
        self.owner = owner
        self.purpose = purpose
        self.started = started
        self.deadline = deadline
        self.bound: Literal["llm_timeout", "run_time"] = bound
        self._attempts = 0
        self._lock = threading.Lock()
        self._abort_hooks: list[Callable[[], object]] = []
        self._aborted = False

    @property
    def attempts(self) -> int:
        with self._lock:
            return self._attempts

    def attempt_sent(self, *_: object) -> None:
        """A request went out (an HTTP client's request hook)."""
        with self._lock:
            self._attempts += 1

    def on_abort(self, hook: Callable[[], object]) -> None:
        """Run ``hook`` (close the call's connections) when the call is abandoned; at once if
        it already was."""
        with self._lock:
            if not self._aborted:
                self._abort_hooks.append(hook)
                return
        _quietly(hook)

    def abort(self) -> None:
        """Abandon the call: whatever it still holds is closed; its result, if any, is dropped."""
        with self._lock:
            self._aborted = True
            hooks, self._abort_hooks = self._abort_hooks, []
        for hook in hooks:
            _quietly(hook)

    @property
    def aborted(self) -> bool:
        with self._lock:
            return self._aborted

    def __repr__(self) -> str:
        return f"ModelCall({self.label!r}, {self.purpose!r}, attempts={self.attempts})"


def _quietly(hook: Callable[[], object]) -> None:
    try:
        hook()
    except Exception:  # noqa: BLE001 - closing an abandoned call must never raise
        pass


class CallsInFlight:
    """The model calls this process is waiting on now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[int, ModelCall] = {}

    @contextmanager
    def track(self, call: ModelCall) -> Iterator[ModelCall]:
        with self._lock:
            self._calls[id(call)] = call
        try:
            yield call
        finally:
            with self._lock:
                self._calls.pop(id(call), None)

    def snapshot(self) -> list[ModelCall]:
        """The calls waiting now, oldest first."""
        with self._lock:
            return sorted(self._calls.values(), key=lambda call: call.started)

    def abandon(self, owners: Collection[object] | None = None) -> int:
        """Abort the calls of ``owners`` (clients), or every call: a run that is stopping lets
        go of them at once instead of waiting out their deadlines. The number aborted."""
        calls = [call for call in self.snapshot() if owners is None or call.owner in owners]
        for call in calls:
            call.abort()
        return len(calls)


#: every model call of this process while it is waited on (``LLMClient.complete`` puts it here)
IN_FLIGHT = CallsInFlight()


def calls_in_flight() -> list[ModelCall]:
    return IN_FLIGHT.snapshot()


def call_files(n: int) -> tuple[str, str, str]:
    """(prompt, reply, usage) file names of call ``n`` (from 1) in a folder: ``prompt.md``,
    ``reply.md``, ``usage.json`` for the first, ``prompt_2.md``, ... after it (a spec reading's
    repair request, a reference problem's second attempt)."""
    suffix = "" if n == 1 else f"_{n}"
    return f"prompt{suffix}.md", f"reply{suffix}.md", f"usage{suffix}.json"


def prompt_text(system: str, user: str) -> str:
    return f"# system\n\n{system}\n\n# user\n\n{user}"


class RecordedClient:
    """An ``LLMClient`` stand-in (``label``, ``complete``) that counts and saves every call.

    Call n writes its prompt before asking (so a call that fails still shows what was
    asked), then its usage (the completion, text included) and its reply, under ``folder`` of
    the run directory. When that call's reply is already on disk, the model is not asked
    again: a step that re-runs on resume was cut short before its state (and its usage) was
    checkpointed, so the saved completion is reused *and* counted — paid once, counted once.

    ``connect`` makes the real client only when a call must really be made, so reusing a
    saved reply needs no key or server.
    """

    def __init__(self, label: str, connect: Callable[[], Completer], run: RunDirectory, folder: str,
                 ledger: UsageLedger | None = None) -> None:
        self.label = label
        self.ledger = ledger if ledger is not None else UsageLedger()
        self._connect = connect
        self._run = run
        self._folder = folder.rstrip("/")
        self._calls = 0
        self._lock = threading.Lock()

    def complete(self, system: str, user: str, *, max_tokens: int, temperature: float) -> Completion:
        with self._lock:
            self._calls += 1
            n = self._calls
        prompt_name, reply_name, usage_name = (f"{self._folder}/{name}" for name in call_files(n))
        saved = self._saved(reply_name, usage_name)
        if saved is not None:
            return saved
        self._run.write(prompt_name, prompt_text(system, user))
        completion = self._connect().complete(system, user, max_tokens=max_tokens, temperature=temperature,
                                              purpose=self.purpose)
        self.ledger.add(completion)
        self._run.write(usage_name, completion.model_dump_json(indent=1))  # before the reply: see _saved
        self._run.write(reply_name, completion.text)
        return completion

    @property
    def purpose(self) -> str:
        """What the calls are for, as the live status shows it: the candidate (``g0-c01``) or
        the step (``spec``, ``reference_problem``)."""
        return self._folder.rsplit("/", 1)[-1]

    def _saved(self, reply_name: str, usage_name: str) -> Completion | None:
        """The completion saved for this call, counted; None when the call was never answered.

        The reply is written last, so a reply on disk means its usage is too; a run directory
        from before usage was saved per call has the reply only, reused but not counted.
        """
        reply = self._run.file(reply_name)
        if not reply.is_file():
            return None
        text = reply.read_text()
        try:
            completion = Completion.model_validate_json(self._run.file(usage_name).read_text())
        except (OSError, ValidationError):
            return Completion(text=text, model=self.label, input_tokens=0, output_tokens=0,
                              cost_usd=None, seconds=0.0, finish_reason=None)
        self.ledger.add(completion)
        return completion.model_copy(update={"text": text})
