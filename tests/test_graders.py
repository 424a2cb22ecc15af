"""The hidden graders as pytest tests: `python -m autograder.graders SUBMISSION` with real pytest."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from submissions.variants import WRONG
from support import REPO, reference_source

from autograder.steps import STEP_IDS


def graders(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "attention_head.py"
    path.write_text(source)
    return subprocess.run([sys.executable, "-m", "autograder.graders", str(path), "--seed", "7", "-q", *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


def failed_tests(output: str) -> set[str]:
    return set(re.findall(r"^FAILED \S+::(test_\w+\[\w+\])", output, re.M))


def test_the_reference_passes_every_hidden_grader(tmp_path):
    done = graders(tmp_path, reference_source())
    assert done.returncode == 0, done.stdout
    assert f"{2 * len(STEP_IDS)} passed" in done.stdout


def test_a_misconception_fails_exactly_the_graders_of_its_steps_with_the_feedback(tmp_path):
    wrong = WRONG["column_normalized"]
    done = graders(tmp_path, wrong.text(), "-rf")
    assert done.returncode == 1
    steps = sorted(wrong.expected)
    assert failed_tests(done.stdout) == ({f"test_the_chapter_example[{s}]" for s in steps}
                                         | {f"test_the_hidden_cases[{s}]" for s in steps})
    assert "[column-normalized]" in done.stdout


def test_a_hard_coded_answer_passes_the_example_and_fails_the_hidden_cases(tmp_path):
    wrong = WRONG["hard_coded_zero_query"]
    done = graders(tmp_path, wrong.text(), "-rf")
    assert failed_tests(done.stdout) == {"test_the_hidden_cases[ex1_zero_query]"}
    assert "[hard-coded]" in done.stdout


def test_a_missing_submission_is_a_one_line_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder.graders", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("nope.py: no such file") and "Traceback" not in done.stderr


def test_a_link_to_the_reference_is_refused_not_graded_as_its_target(tmp_path):
    """As qkv-grade does: the link is never followed, so the reference it points at earns nothing."""
    link = tmp_path / "attention_head.py"
    link.symlink_to(REPO / "solutions" / "attention_head.py")
    done = subprocess.run([sys.executable, "-m", "autograder.graders", str(link), "--seed", "7", "-q"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and "passed" not in done.stdout, done.stdout
    assert "symbolic link" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_modules_beside_the_submission_never_run_in_the_grader_started_in_its_folder(tmp_path):
    """`python -m` puts the folder it is started in first on sys.path: a student's numpy.py,
    secrets.py, pytest.py or pathlib.py there would run in the grader's own process, with the
    instructor's rights, before or instead of the real module. Started in the submission's folder,
    `qkv-graders` imports none of them (nor an autograder.py), and neither do the graders' and
    qkv-grade's module entry points once the package is found (an autograder.py there would be
    found first, as the README says)."""
    for name in ("numpy", "secrets", "pytest", "pathlib", "json", "autograder"):
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / ('RAN-' + name))!r}, 'w').close()\n"
                                             "raise SystemExit(3)\n")
    (tmp_path / "attention_head.py").write_text(reference_source())
    script = subprocess.run([str(Path(sys.executable).with_name("qkv-graders")), "attention_head.py", "--seed", "7",
                             "-q"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert script.returncode == 0, script.stdout[-2000:] + script.stderr[-2000:]
    assert f"{2 * len(STEP_IDS)} passed" in script.stdout
    (tmp_path / "autograder.py").unlink()
    done = graders(tmp_path, reference_source())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{2 * len(STEP_IDS)} passed" in done.stdout
    cli = subprocess.run([sys.executable, "-m", "autograder.cli", "attention_head.py", "--seed", "7", "--format",
                          "json"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert '"score": 100.0' in cli.stdout
    assert sorted(path.name for path in tmp_path.glob("RAN-*")) == []
