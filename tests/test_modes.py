"""The grader's verdict tests, again, in every other sandbox mode this machine offers.

The rest of the suite grades in the mode `qkv-grade` picks by itself (the strongest). Here the same
verdict tests (correct variants, each misconception, each fault, the sample class and the isolation
tests) run once more for each other sealed mode, forced with QKV_SANDBOX, and must pass unchanged.
The mode of a normal user (`bwrap-userns`) is also run by the red-team suite as a real
unprivileged user.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support import IN_CI, REPO, sandbox_mode

from autograder import sandbox

VERDICT_TESTS = ["tests/test_isolation.py", "tests/test_diagnoses.py", "tests/test_sample_class.py",
                 "tests/test_graders.py"]
OTHERS = [mode for mode in sandbox.AUTO_ORDER if mode != sandbox_mode()]


@pytest.mark.parametrize("mode", OTHERS)
def test_the_verdict_tests_pass_unchanged_in_every_mode(mode):
    problem = sandbox.available(mode)
    if problem:
        if IN_CI and mode != "bwrap":  # CI runs as root, so it offers every mode but, as a user, bwrap
            pytest.fail(f"{mode}: {problem}")
        pytest.skip(f"{mode}: {problem}")
    env = {**os.environ, "QKV_SANDBOX": mode}
    env.pop("PYTEST_ADDOPTS", None)
    # Serially (`-n 0`): this test is already one of the suite's workers.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *VERDICT_TESTS],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    assert done.returncode == 0, f"{mode}: {summary}\n{done.stdout[-4000:]}"
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary
