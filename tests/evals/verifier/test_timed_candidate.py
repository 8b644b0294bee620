"""The timed candidate's inputs: fresh value sets only where the device has room for them
(the checks of the sampled outputs themselves run on a GPU: ``test_timing_stage.py``)."""

from kgen.evals.verifier.timed_candidate import FRESH_INPUT_SETS, fresh_sets_fit

GB = 10**9


def test_fresh_sets_are_drawn_only_where_they_fit_beside_the_outputs():
    assert fresh_sets_fit(80 * GB, 1 * GB, 1 * GB)
    # two more 10 GB input sets and five 10 GB outputs do not fit in 60 GB
    assert not fresh_sets_fit(60 * GB, 10 * GB, 10 * GB)
    assert not fresh_sets_fit(0, 1, 1)
    # an unknown output size is taken as large as the inputs
    assert fresh_sets_fit(10 * GB, GB, None) and not fresh_sets_fit(int(7.4 * GB), GB, None)
    assert FRESH_INPUT_SETS == 2
