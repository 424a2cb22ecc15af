"""Grades the submission named by QKV_SUBMISSION once per pytest session, in the isolated runner."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def graded():
    """The grader (its cases) and the per-step results for the submission under test."""
    from autograder.grading import Grader
    from autograder.runner import Worker
    from autograder.submission import load

    path = os.environ.get("QKV_SUBMISSION")
    if not path:
        pytest.skip("set QKV_SUBMISSION, or run: qkv-graders SUBMISSION")
    seed = int(os.environ.get("QKV_SEED") or secrets.randbelow(2**31))
    grader = Grader(seed)
    with Worker(grader.limits) as worker:
        result = grader.grade(worker, load(Path(path)))
    return grader, {step.id: step for step in result.steps}


def pytest_report_header(config):
    return f"submission: {os.environ.get('QKV_SUBMISSION', '(none)')}"
