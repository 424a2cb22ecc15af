"""Shared helpers for the test suite: the reference's source, submissions made from it, qkv-grade runs."""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solutions" / "attention_head.py"
STUB = REPO / "assignments" / "attention_head" / "attention_head.py"
IN_CI = os.environ.get("CI") == "true"
SAMPLE_NOTEBOOK = REPO / "data" / "sample-submission" / "attention_head.ipynb"  # one slip: a column-normalized softmax

# How the pages in the README's pictures are made (tests/test_browser.py and tests/test_report.py
# take the pictures; data/readme_figures.py digests what they show from the same runs).
FEEDBACK_COURSE_SEED = 5
"""The seed of the course whose feedback page for the sample notebook the README shows."""
REPORT_RUN = ("--seed", "1", "--timeout", "0.5")
"""How the sample class is graded for the class report the README shows."""


def readme_figures():
    """data/readme_figures.py, which makes the README's figures and pictures, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_figures", REPO / "data" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_readme_shows(values: dict[str, str]) -> None:
    """Fail, saying how to bring README.md up to date, where it quotes other figures than `values`
    or records other digests beside its pictures (see data/readme_figures.py)."""
    figures = readme_figures()
    stale = figures.stale((REPO / "README.md").read_text(encoding="utf-8"), values)
    if stale:
        pytest.fail(f"README.md is out of date; run `{figures.COMMAND}` to make its figures and pictures "
                    "again:\n  " + "\n  ".join(stale), pytrace=False)


def reference_source() -> str:
    """The reference solution as a student would hand it in: no solution markers."""
    return re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION\n", "", REFERENCE.read_text(), flags=re.M)


def variant(replacements: list[tuple[str, str]], append: str = "") -> str:
    """The reference with exact textual replacements (each must match) and extra code appended."""
    source = reference_source()
    for old, new in replacements:
        assert old in source, f"replacement target not in the reference: {old!r}"
        source = source.replace(old, new)
    return source + append


def copy_sample_class(folder: Path, copies: int) -> Path:
    """`copies` copies of the sample class in `folder` (ada0.py, ben0.py, ...), less the one that
    loops: a class with nothing to wait for."""
    folder.mkdir(parents=True)
    samples = sorted(path for path in (REPO / "data" / "sample-class").glob("*.py") if path.name != "gus.py")
    for number in range(copies):
        for sample in samples:
            shutil.copyfile(sample, folder / f"{sample.stem}{number}.py")
    return folder


def sandbox_mode() -> str | None:
    """The sandbox mode the grader will pick here (QKV_SANDBOX, or the strongest), None if none."""
    from autograder import sandbox

    try:
        return sandbox.choose()
    except sandbox.SandboxUnavailable:
        return None


def sandboxed() -> bool:
    return sandbox_mode() not in (None, "none")


def require_sandbox() -> None:
    """Skip without a sealed sandbox mode; under CI=true that is a failure, not a skip."""
    if not sandboxed():
        message = "needs a sandbox: bubblewrap, user namespaces or Landlock"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def graded_in_worker(grader, tmp_path: Path, source: str, mode: str | None = None):
    """`source` graded as attention_head.py by `grader` in a worker of its own (in sandbox mode
    `mode`, or the strongest): (the runner's Run, the SubmissionResult)."""
    from autograder.runner import Worker
    from autograder.submission import load

    path = tmp_path / "attention_head.py"
    path.write_text(source)
    submission = load(path)
    with Worker(grader.limits, mode) as worker:
        run = worker.receive(grader.send(worker, submission))
    return run, grader.judge(submission, run, 0.0)


def qkv_grade(*args: str, cwd: Path | None = None, timeout: float = 300,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=None if env is None else {**os.environ, **env})


def grade_json(path: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    done = qkv_grade(str(path), "--format", "json", *args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def steps_by_id(result: dict) -> dict[str, dict]:
    return {step["id"]: step for step in result["steps"]}


def jupyter_env(root: Path) -> dict[str, str]:
    """The environment with Jupyter's, IPython's and HOME's folders inside `root`, so nbgrader,
    its kernel and ipykernel's install write nothing to the real home directory.

    The interpreter's scripts folder leads PATH: nbgrader runs `alembic` by name, and the suite
    must pass with the venv not activated."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), env.get("PATH", os.defpath)])
    for name, folder in (("HOME", "home"), ("JUPYTER_CONFIG_DIR", "jupyter-config"),
                         ("JUPYTER_DATA_DIR", "jupyter-data"), ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
                         ("IPYTHONDIR", "ipython")):
        (root / folder).mkdir(exist_ok=True)
        env[name] = str(root / folder)
    env.update(MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1", JUPYTER_PLATFORM_DIRS="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


# --- nbgrader courses ---------------------------------------------------------------------------

ASSIGNMENT = "ps1"
NOTEBOOK = "attention_head.ipynb"


def filled_notebook(release_notebook: Path, source: str, extra: dict[str, str] | None = None):
    """The release notebook with its solution cells filled from `source` and answers written.

    `extra` maps a solution cell's function name to code placed at the top of that cell.
    """
    import nbformat

    from autograder import release

    functions = release.function_sources(source)
    notebook = nbformat.read(release_notebook, as_version=4)
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        if cell.cell_type == "code":
            name = re.match(r"def (\w+)", cell.source).group(1)
            cell.source = (extra or {}).get(name, "") + functions[name]
        else:
            cell.source = "The weights stay uniform, so the output is the mean of the value rows."
    return notebook


@functools.lru_cache(maxsize=1)
def _generated_course() -> Path:
    """`qkv-course --seed 5` and `nbgrader generate_assignment`, run once per test process, in a
    folder of its own removed at exit: the course every build_course starts from. Nothing in it
    names where it lies (nbgrader_config.py finds its root beside itself), so a copy works anywhere."""
    root = Path(tempfile.mkdtemp(prefix="qkv-course-"))
    atexit.register(shutil.rmtree, root, True)
    env = jupyter_env(root)
    path = root / "course"
    for argv, cwd in (([sys.executable, "-m", "autograder.nbgrader_course", str(path), "--seed", "5"], root),
                      ([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT], path)):
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    return path


def build_course(root: Path, students: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A course in root/course after `nbgrader generate_assignment`, each student's notebook the
    release filled from their source, nothing graded; returns it and its Jupyter environment."""
    env = jupyter_env(root)
    path = root / "course"
    shutil.copytree(_generated_course(), path, symlinks=True)
    released = path / "release" / ASSIGNMENT / NOTEBOOK
    for student, source in students.items():
        submit_notebook(path, student, filled_notebook(released, source))
    return path, env


# What formgrader does with a submission (nbgrader's load_jupyter_server_extension and
# SubmissionHandler), without the server: its exporter comes from the course's configuration.
FORMGRADE = """\
import sys
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension
formgrader = FormgradeExtension()
formgrader.root_dir = "."
formgrader.initialize([])
page, _ = HTMLExporter(config=formgrader.config).from_filename(
    sys.argv[1], resources={"base_url": "", "index": 0, "total": 1})
sys.stdout.write(page)"""


def released_course(root: Path, seed: int) -> tuple[Path, dict[str, str], Path]:
    """A course in root/course after `nbgrader generate_assignment`, with the `python3` kernel that
    autograde runs installed in root's Jupyter folders: (the course, its environment, the
    released notebook)."""
    env = jupyter_env(root)
    path = root / "course"
    for argv, cwd in (([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"], root),
                      ([sys.executable, "-m", "autograder.nbgrader_course", str(path), "--seed", str(seed)], root),
                      ([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT], path)):
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    return path, env, path / "release" / ASSIGNMENT / NOTEBOOK


def submit_notebook(course: Path, student: str, notebook) -> Path:
    """Put `notebook` where `nbgrader collect` would, beside the release's other files."""
    import nbformat

    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    for path in (course / "release" / ASSIGNMENT).iterdir():
        if path.suffix != ".ipynb":
            (folder / path.name).write_bytes(path.read_bytes())
    nbformat.write(notebook, folder / NOTEBOOK)
    return folder / NOTEBOOK


def gradebook_scores(course: Path) -> dict[str, dict[str, float | None]]:
    """Student -> step id -> the auto score of that step's check cell."""
    from nbgrader.api import Gradebook

    from autograder import release
    from autograder.steps import STEPS

    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for submission in gradebook.find_assignment(ASSIGNMENT).submissions:
            student = submission.student.id
            scores[student] = {step.id: gradebook.find_grade(release.check_cell_id(step.id), Path(NOTEBOOK).stem,
                                                             ASSIGNMENT, student).auto_score
                               for step in STEPS}
    return scores


def notebook_scores(notebook_path: Path) -> dict[str, float]:
    """Step id -> the trusted score an autograded notebook shows."""
    import nbformat

    return dict(nbformat.read(notebook_path, as_version=nbformat.NO_CONVERT).metadata["qkv"]["trusted_scores"])


# --- file systems that fail ---------------------------------------------------------------------

@contextlib.contextmanager
def nested(folder: Path, depth: int, last_file: str | None = None):
    """`depth` folders named d inside `folder`, one inside the next (deeper than Python's recursion
    limit), with `last_file` in the deepest; removed afterwards without recursion, which neither
    pytest's nor shutil's clean-up can do."""
    from autograder.inside import remove_tree

    here = os.open(folder, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=here)
        below = os.open("d", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = below
    if last_file:
        os.close(os.open(last_file, os.O_WRONLY | os.O_CREAT, dir_fd=here))
    os.close(here)
    try:
        yield folder / "d"
    finally:
        remove_tree(str(folder / "d"))


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` made read-only, for root too: a read-only bind mount of itself."""
    _mount(["--bind", str(folder), str(folder)])
    try:
        _mount(["-o", "remount,bind,ro", str(folder)])
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64k"):
    """`folder` as a tmpfs of `size` bytes: the disk fills after a few results."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)])
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _mount(argv: list[str]) -> None:
    """Mount, or skip the test where that is not allowed (under CI=true: fail)."""
    done = subprocess.run(["mount", *argv], capture_output=True, text=True) if os.geteuid() == 0 else None
    if done is None or done.returncode != 0:
        message = "needs root and mount: " + (done.stderr.strip() if done else "not root")
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
