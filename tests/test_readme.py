"""The README's promises: its first two commands, its step table matching the step table, its
quote of nbgrader, and its nbgrader and Gradescope blocks running as written. (The other blocks
are covered elsewhere: the first two by .ci/run itself, the self-check by test_release.py,
grading by test_cli.py.)"""
from __future__ import annotations

import logging
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from support import REPO, jupyter_env

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


def test_the_quoted_checksum_warning_is_the_one_nbgrader_prints():
    """The README quotes what autograde logs for each check cell; nbgrader's own code says it,
    with the grade id and both checksums elided."""
    from nbgrader.preprocessors import OverwriteCells

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    overwrite = OverwriteCells()
    overwrite.log.addHandler(handler)
    try:
        overwrite.report_change("check-…", "checksum", "…", "…")
    finally:
        overwrite.log.removeHandler(handler)
    quoted = re.search(r"Autograde prints `([^`]*)`", README).group(1)
    assert said == [quoted]


def _block_after(heading: str) -> str:
    """The first ```sh block after `heading` in the README."""
    return re.findall(r"```sh\n(.*?)\n```", README[README.index(heading):], re.S)[0]


@pytest.mark.parametrize("heading, made", [
    ("### nbgrader", ["course/feedback/sample/ps1/attention_head.html", "course/grades.csv"]),
    ("To try the bundle locally", ["gs/results/results.json"]),
])
def test_the_readme_blocks_for_nbgrader_and_gradescope_run_as_written(heading, made, tmp_path):
    """Run literally, from a folder laid out like the repository's root, with the venv not
    activated and PATH cut to the system's folders."""
    (tmp_path / ".venv").symlink_to(Path(sysconfig.get_path("scripts")).parent)
    (tmp_path / "data").symlink_to(REPO / "data")
    env = {**jupyter_env(tmp_path), "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run(["bash", "-euc", _block_after(heading)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in made:
        assert (tmp_path / name).is_file(), name
