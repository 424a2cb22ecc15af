"""One pair of tests per step: the chapter's worked example, then the seeded hidden cases.

The example's expected values are tied to data/part-iv/attention.json (the grader refuses to run
if the reference disagrees with it); the hidden cases are compared with the reference solution.
A failing test's message is the step's feedback, exactly as `qkv-grade` gives it.
"""
from __future__ import annotations

import pytest

from autograder.steps import STEP_IDS


@pytest.mark.parametrize("step_id", STEP_IDS)
def test_the_chapter_example(graded, step_id):
    grader, steps = graded
    assert not grader.disagreements_with_chapter()
    result = steps[step_id]
    examples = [ok for case, ok in zip(grader.cases[step_id], result.case_passed) if case.public]
    assert examples and all(examples), result.feedback


@pytest.mark.parametrize("step_id", STEP_IDS)
def test_the_hidden_cases(graded, step_id):
    grader, steps = graded
    result = steps[step_id]
    hidden = [ok for case, ok in zip(grader.cases[step_id], result.case_passed) if not case.public]
    assert hidden and all(hidden), result.feedback
