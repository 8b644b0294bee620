"""The correctness stage: the trial plan against the fp64 reference, then the ghost check,
the plain call sequence, the cache probe and, on a GPU, the race check.

Trials run in a fixed order, so a failure can be named by what passed before it
(``failure_order.py`` states the naming): the baseline first, the default sizes on the
problem's own inputs over every seed and, where those are of one sign, standard-normal
inputs; then the other input distributions, then the other size sets (``trials.py``), then
one trial per varied argument other than a size (``argument_trials.py``). Then the ghost check (kernels switched off must
change the output, ``ghost_check.py``), the input-sensitivity check (on a low-signal problem
the output must follow its inputs, ``input_sensitivity.py``), the uninstrumented call sequence
(``call_sequence.py``), the cache probe (new values in the same buffers must give new
outputs) and the race check (the same inputs under other launch conditions must give the
same answer within the tolerance, ``race_check.py``; skipped on the CPU, and the report
says so).
"""

from __future__ import annotations

import time

from kgen.evals.checks.precision_probe import ACCUMULATION_PROBES as PROBE_DISTRIBUTIONS
from kgen.evals.problem.format import load_problem, read_problem
from kgen.evals.problem.input_distributions import distributions_for
from kgen.evals.verdict import StageStatus
from kgen.evals.verifier.argument_trials import run_argument_trials
from kgen.evals.verifier.call_sequence import run_cache_probe, run_call_sequence
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.ghost_check import run_ghost_check
from kgen.evals.verifier.input_sensitivity import run_input_sensitivity
from kgen.evals.verifier.race_check import run_race_check
from kgen.evals.verifier.trial_parts import problem_at
from kgen.evals.verifier.trials import run_trial


def trial_plan(ctx: VerifierContext) -> list[tuple[dict[str, int], str, int]]:
    """(sizes, distribution, seed) for every trial, in the order that names failures."""

    seeds = ctx.request.seeds
    first_sizes = ctx.request.size_sets[0]
    info = read_problem(ctx.request.problem_path)
    # Where the device cannot hold the fp64 reference, one trial runs at the full sizes and
    # the rest where it can (``DeviceMemory.scaled``): the report's memory notes say which.
    rest = ctx.memory.scaled(info, first_sizes) or first_sizes
    ctx.behaviour_sizes = rest
    plan = [(first_sizes, "normal", seeds[0])] + [(rest, "normal", seed) for seed in seeds[1:]]
    ctx.baseline_sizes = [first_sizes, rest]
    if ctx.request.distributions:
        ctx.torch.manual_seed(seeds[0])
        problem = load_problem(ctx.request.problem_path, rest)
        names = [d for d in distributions_for(problem.info, problem.get_inputs()) if d != "normal"]
        drawn = ctx.memory.distribution_sizes(info, rest) or rest
        probe_sizes = ctx.request.probe_sizes or drawn
        ctx.baseline_sizes.append(drawn)  # where standard-normal inputs run, when they do
        plan += [
            (probe_sizes if name in PROBE_DISTRIBUTIONS else drawn, name, seeds[(i + 1) % len(seeds)])
            for i, name in enumerate(names)
        ]
    for i, sizes in enumerate(ctx.request.size_sets[1:]):
        scaled = ctx.memory.scaled(info, sizes)
        if scaled is not None and sizes in ctx.generated:
            ctx.generated.append(scaled)
        plan.append((scaled or sizes, "normal", seeds[i % len(seeds)]))
    return plan


def _varied_text(varied: list[str]) -> str:
    return f" and {len(varied)} varied argument(s) ({'; '.join(varied)})" if varied else ""


class CorrectnessStage:
    """Every trial of the plan, a made-up size set the reference cannot run replaced by its
    one-constant-at-a-time fallbacks; then the checks of what a candidate does across calls."""

    name = "correctness"

    def run(self, ctx: VerifierContext) -> None:
        started = time.monotonic()
        ctx.worst = 0.0
        ctx.problems = {}
        ctx.generated = [ctx.request.size_sets[i] for i in ctx.request.generated_size_sets]
        with ctx.timeline.span("plan"):
            plan = trial_plan(ctx)
        generated = ctx.generated
        fallbacks = {
            repr(sorted(ctx.request.size_sets[i].items())): sets
            for i, sets in ctx.request.fallback_size_sets.items()
        }
        for sizes, distribution, seed in plan:
            with ctx.timeline.span("trial", gpu=ctx.gpu):
                skipped = run_trial(ctx, sizes, distribution, seed, generated=sizes in generated)
            if skipped and distribution == "normal":
                # A combined move the reference cannot run: each constant's move alone.
                for alone in fallbacks.get(repr(sorted(sizes.items())), []):
                    with ctx.timeline.span("trial", gpu=ctx.gpu):
                        run_trial(ctx, alone, distribution, seed, generated=True)
        with ctx.timeline.span("argument_trials", gpu=ctx.gpu):
            varied = run_argument_trials(ctx)
        with ctx.timeline.span("problems"):
            first = problem_at(ctx, ctx.request.size_sets[0])
            behaviour = problem_at(ctx, ctx.behaviour_sizes)
        if not ctx.request.reference_self_test:
            with ctx.timeline.span("ghost_check", gpu=ctx.gpu):
                run_ghost_check(ctx, behaviour, ctx.request.seeds[0])
        # noted for the reference self-test too; judged only for a candidate
        with ctx.timeline.span("input_sensitivity", gpu=ctx.gpu):
            run_input_sensitivity(ctx, behaviour, ctx.request.seeds[0])
        # The plain calls before the cache probe: both run uninstrumented, and a candidate that
        # is honest only while watched is then named for that, not for what its cheat looks like.
        with ctx.timeline.span("call_sequence", gpu=ctx.gpu):
            sequence = run_call_sequence(ctx, behaviour, ctx.request.seeds[0] + 31337)
        # at the full sizes always: it needs no reference, and a cache keyed by size is caught there
        with ctx.timeline.span("cache_probe", gpu=ctx.gpu):
            run_cache_probe(ctx, first, ctx.request.seeds[-1])
        with ctx.timeline.span("race_check", gpu=ctx.gpu):
            race = run_race_check(ctx, behaviour, ctx.request.seeds[0] + 4099)
        record_stage(
            ctx,
            self.name,
            StageStatus.PASSED,
            f"{len(ctx.report.trials)} trial(s) matched the fp64 reference over {len(ctx.request.seeds)} seed(s), "
            f"{len({d for _, d, _ in plan})} input distribution(s) and {len({repr(t.sizes) for t in ctx.report.trials})} "
            f"size set(s){_varied_text(varied)}; worst error {ctx.worst:.2f}x of tolerance; kernels switched off change the output; "
            f"new inputs in old buffers give new outputs; {sequence.summary}; {race.summary}",
            started,
            seeds=ctx.request.seeds,
            size_sets=ctx.request.size_sets,
            distributions=sorted({d for _, d, _ in plan}),
            arguments_varied=varied,
            worst_error_over_tolerance=ctx.worst,
            weights=ctx.transfer.model_dump() if ctx.transfer is not None else None,
            call_sequence=sequence.model_dump(),
            race_check=race.model_dump(),
        )
