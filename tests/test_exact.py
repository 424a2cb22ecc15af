"""A call that returns exactly what the reference returns is known by its bytes, unread; any other
value, however close, is read and compared as before. Real workers, real sandbox."""
from __future__ import annotations

import pytest
from support import graded_in_worker, reference_source, require_sandbox, variant

from autograder.grading import Grader
from autograder.runner import EXACT

SEED = 7


@pytest.fixture(scope="module")
def grader():
    require_sandbox()
    return Grader(SEED)


def _graded(grader, tmp_path, source: str):
    return graded_in_worker(grader, tmp_path, source)


def test_the_reference_is_known_by_its_bytes_and_scores_full_marks(grader, tmp_path):
    run, result = _graded(grader, tmp_path, reference_source())
    assert all(outcome.value is EXACT for step in run.outcomes for outcome in step)
    assert result.score == result.max_score


def test_values_a_bit_off_or_with_output_are_read_and_still_pass(grader, tmp_path):
    # scale's result one rounding step away from the reference's, and mix printing a line: neither
    # frame is the reference's, so both are read; both are within tolerance and earn every point.
    source = variant([("s = d / np.sqrt(d_k)", "s = (1 + 2**-52) * d / np.sqrt(d_k)")],
                     append="\n_mix = mix\n\ndef mix(a, v):\n    print('mixing')\n    return _mix(a, v)\n")
    run, result = _graded(grader, tmp_path, source)
    steps = [step for step, _ in grader.calls]
    for name in ("scale", "mix"):
        outcomes = run.outcomes[steps.index(name)]
        assert outcomes and all(outcome.value is not EXACT and outcome.value is not None for outcome in outcomes)
    assert run.outcomes[steps.index("qkv")][0].value is EXACT
    assert result.score == result.max_score, [(s.id, s.status, s.diagnoses) for s in result.steps]


def test_a_value_off_by_more_than_the_tolerance_is_read_and_diagnosed(grader, tmp_path):
    source = variant([("s = d / np.sqrt(d_k)", "s = d / d_k")])
    run, result = _graded(grader, tmp_path, source)
    scale = next(step for step in result.steps if step.id == "scale")
    assert scale.status != "passed" and "scaled-by-d_k" in scale.diagnoses
