"""Shared helpers for the test suite: the reference's source, submissions made from it, qkv-grade runs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solutions" / "attention_head.py"
STUB = REPO / "assignments" / "attention_head" / "attention_head.py"
IN_CI = os.environ.get("CI") == "true"


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
