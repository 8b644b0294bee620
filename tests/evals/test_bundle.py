"""Evidence bundles: written from a real verification, read back unchanged, refused when any
part was edited (naming the part), and the one agreement rule between a bundle and a re-run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kgen.backends.device import Device
from kgen.evals.bundle import (
    BUNDLE_FILE,
    BundleError,
    EvidenceBundle,
    Interval,
    agreement,
    bundle_for_files,
    read_bundle,
    write_bundle,
)
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import InconclusiveCause, RejectionClass, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
GOOD = FIXTURES / "candidates" / "relu_kernelbench_solution.py"
WRONG = FIXTURES / "candidates" / "relu_wrong_math.py"


@pytest.fixture(scope="module")
def bundles() -> dict[str, EvidenceBundle]:
    """A passing and a rejected verification of real kernels on the CPU, as bundles."""
    options = EvalOptions(device="cpu", n_seeds=2)
    return {name: bundle_for_files(evaluate(RELU, kernel, options), options, kernel, RELU)
            for name, kernel in (("passed", GOOD), ("rejected", WRONG))}


def _written(bundle: EvidenceBundle, folder: Path) -> Path:
    return write_bundle(bundle, folder)


def _edit(path: Path, change) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))
    return path


def test_a_bundle_holds_what_a_re_run_needs_and_reads_back_unchanged(bundles, tmp_path):
    bundle = bundles["passed"]
    assert bundle.kernel_source == GOOD.read_text() and bundle.problem_source == RELU.read_text()
    assert bundle.problem == "relu_kernelbench" and bundle.problem_file == RELU.name
    assert len(bundle.settings.seeds) == 2 and bundle.settings.seeds == bundle.result.stage("correctness").evidence["seeds"]
    assert {t.seed for t in bundle.result.trials} <= set(bundle.settings.seeds)
    assert bundle.settings.size_sets and bundle.settings.device is Device.CPU
    assert {"torch", "triton", "python"} <= set(bundle.libraries) and bundle.device_name == "cpu"
    assert bundle.result.verdict is Verdict.PASSED and len(bundle.sha256) == 64
    path = _written(bundle, tmp_path)
    assert path == tmp_path / BUNDLE_FILE
    assert read_bundle(tmp_path) == bundle
    # the re-run's options are the recorded ones, untimed
    options = bundle.settings.eval_options(Device.CPU)
    assert options.seeds == bundle.settings.seeds and options.n_seeds == 2 and not options.bench
    assert (options.precision, options.torch_ops) == (bundle.settings.precision, bundle.settings.torch_ops)


def _flip_to_passed(data: dict[str, Any]) -> None:
    data["result"]["verdict"] = "passed"
    data["result"]["rejection"] = None


TAMPERING = [
    ("source edited", "passed", lambda d: d.update(kernel_source=d["kernel_source"].replace("0.0", "0.5")),
     "kernel source"),
    ("verdict flipped to passed", "rejected", _flip_to_passed, "results"),
    ("seeds changed", "passed", lambda d: d["settings"].update(seeds=[1, 2]), "verifier settings"),
    ("problem edited", "passed", lambda d: d.update(problem_source=d["problem_source"] + "\n# edited\n"), "problem"),
    ("library versions edited", "passed", lambda d: d["libraries"].update(torch="9.9"), "environment"),
    ("timing added", "passed", lambda d: d["timings"].update(candidate={"median_ms": 0.001}), "results"),
    ("sha256 edited to match nothing", "passed", lambda d: d.update(sha256="0" * 64), "the bundle's sha256"),
    ("a digest edited", "rejected", lambda d: d["digests"].update(results="f" * 64), "results"),
    ("digests removed", "passed", lambda d: d.pop("digests"), "digests are missing"),
]


@pytest.mark.parametrize(("style", "which", "change", "named"), TAMPERING, ids=[t[0] for t in TAMPERING])
def test_a_tampered_bundle_is_refused_in_one_line_naming_what_does_not_match(bundles, tmp_path, style, which,
                                                                             change, named):
    path = _edit(_written(bundles[which], tmp_path), change)
    with pytest.raises(BundleError) as caught:
        read_bundle(path)
    message = caught.value.message
    assert "\n" not in message and named in message and "refusing to verify" in message


def test_an_edit_names_every_part_it_touched(bundles, tmp_path):
    path = _edit(_written(bundles["rejected"], tmp_path),
                 lambda d: (_flip_to_passed(d), d["settings"].update(seeds=[7])))
    with pytest.raises(BundleError, match=r"\(verifier settings, results: not what its sha256 recorded\)"):
        read_bundle(path)


@pytest.mark.parametrize(("text", "why"), [("not json {", "is not a bundle"), ("[1, 2]", "no sha256 field"),
                                           ('{"sha256": "x"}', "digests are missing")])
def test_what_is_not_a_bundle_is_bad_input(tmp_path, text, why):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(BundleError, match=why):
        read_bundle(path)
    with pytest.raises(BundleError, match="bundle not found"):
        read_bundle(tmp_path / "missing.json")


def test_agreement_is_the_same_verdict_class_and_error_within_tolerance(bundles):
    passed, rejected = bundles["passed"], bundles["rejected"]
    assert agreement(passed, passed.result).word == "agrees"
    assert agreement(rejected, rejected.result).word == "agrees"
    assert rejected.result.rejection is RejectionClass.MISMATCH
    # a pass re-run as a rejection, and a rejection re-run as another class, disagree (exit 1)
    assert agreement(passed, rejected.result).exit_code == 1
    other_class = rejected.result.model_copy(update={"rejection": RejectionClass.NAN_OR_INF})
    verdict = agreement(rejected, other_class)
    assert verdict.word == "disagrees" and "numerical_mismatch" in verdict.reasons[0]
    # a pass whose re-run errs beyond the recorded tolerance disagrees
    trial = passed.result.trials[0]
    worse = trial.model_copy(update={"outputs": [o.model_copy(update={"rel_l2_error": 1.0})
                                                 for o in trial.outputs]})
    beyond = passed.result.model_copy(update={"trials": [worse, *passed.result.trials[1:]]})
    assert "outside the recorded tolerance" in agreement(passed, beyond).reasons[0]
    # a re-run with no verdict is a harness fault: inconclusive (exit 3), never "disagrees"
    stuck = passed.result.model_copy(update={"verdict": Verdict.INCONCLUSIVE,
                                             "inconclusive": InconclusiveCause.HARNESS_ERROR})
    assert (agreement(passed, stuck).word, agreement(passed, stuck).exit_code) == ("inconclusive", 3)


def test_a_timed_bundle_says_timing_is_not_re_judged(bundles):
    interval = Interval(median_ms=0.5, p10_ms=0.48, p90_ms=0.53)
    timed = bundles["passed"].model_copy(update={"timings": {"candidate": interval}})
    notes = agreement(timed, timed.result).notes
    assert any("timing not re-judged" in n and "p10 0.48" in n for n in notes)
