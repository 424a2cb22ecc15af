"""The README's promises: its first two commands, and its step table matching the step table."""
from __future__ import annotations

import re

from support import REPO

from autograder.steps import STEPS

README = (REPO / "README.md").read_text()


def test_the_readme_opens_with_the_run_command_then_the_test_command():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    assert commands[0].endswith("qkv-grade data/sample-class")
    assert commands[1].endswith("python -m pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_the_readme_step_table_matches_the_step_table():
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([0-9.]+) \| (§[0-9.]+) \|", README, re.M)
    assert rows == [(s.id, f"{s.points:g}", s.section) for s in STEPS]
