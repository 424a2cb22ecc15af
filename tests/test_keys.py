"""The grading key: a seed reproduces a grade under one key, and reveals nothing without it."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from autograder import cases, keys
from support import REPO, grade_json, qkv_grade, reference_source, require_sandbox, steps_by_id, variant

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


def _arrays(built: dict) -> dict[tuple[str, int, int], list[np.ndarray]]:
    """Every hidden case's array arguments, by (step, case, call)."""
    return {(step, number, index): [arg for arg in call.args if isinstance(arg, np.ndarray)]
            for step, step_cases in built.items() for number, case in enumerate(step_cases)
            if case.kind not in ("example", "property") for index, call in enumerate(case.calls)}


def _same(left: list[np.ndarray], right: list[np.ndarray]) -> bool:
    return len(left) == len(right) and all(a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
                                           for a, b in zip(left, right))  # a NaN entry is a case too


def test_one_seed_under_one_key_draws_the_same_cases_every_time():
    first, again = _arrays(cases.build(7, KEY)), _arrays(cases.build(7, KEY))
    assert first.keys() == again.keys() and all(_same(first[place], again[place]) for place in first)


def test_without_the_key_a_small_seed_predicts_no_hidden_input():
    """The attacker knows the seed (7) and the code; every key it might guess draws other inputs,
    and so does the unkeyed generator of the seed alone."""
    actual = _arrays(cases.build(7, KEY))
    fixed = _arrays(cases.build(7, OTHER))  # a case the code writes out whole is no secret to begin with
    actual = {place: arrays for place, arrays in actual.items() if not _same(arrays, fixed[place])}
    assert len(actual) > 50
    guesses = [_arrays(cases.build(seed, key)) for seed in range(12) for key in (OTHER, b"", b"\0" * 32)]
    unkeyed = {}
    for number, step_id in enumerate(cases.STEP_IDS):  # numpy's generator on [seed, step] alone
        rng = np.random.default_rng([7, number])
        unkeyed.update({(step_id, i, j): [a for a in call.args if isinstance(a, np.ndarray)]
                        for i, (kind, calls) in enumerate(cases.BUILDERS[step_id](rng, cases.example_arrays()))
                        for j, call in enumerate(calls)})
    for guess in guesses + [unkeyed]:
        hits = [place for place in actual if place in guess and actual[place] and _same(actual[place], guess[place])]
        assert not hits, hits[:3]


def _without_key(tmp_path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != keys.VARIABLE}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def test_the_key_file_is_made_once_private_and_agreed_on_by_runs_started_together(tmp_path):
    env = _without_key(tmp_path)
    code = "from autograder import keys; print(keys.local_key().hex())"
    started = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
               for _ in range(6)]
    printed = {process.communicate(timeout=60)[0].strip() for process in started}
    path = tmp_path / "config" / "qkv-grade" / "case-key"
    assert printed == {path.read_text().strip()} and len(printed.pop()) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["case-key"]  # no partial file left


def test_a_seed_reproduces_a_grade_under_the_same_key_file(tmp_path):
    env = _without_key(tmp_path)
    path = tmp_path / "attention_head.py"
    path.write_text(variant([("a = e / e.sum(axis=-1, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")]))
    first = grade_json(path, "--seed", "7", env=env)
    again = grade_json(path, "--seed", "7", env=env)
    assert [(s["id"], s["score"], s["feedback"]) for s in first["steps"]] == \
           [(s["id"], s["score"], s["feedback"]) for s in again["steps"]]


@pytest.mark.parametrize("value, says", [("zz", "does not hold a grading key"), ("ab" * 4, "does not hold")])
def test_a_key_that_is_not_one_is_refused_in_one_line(tmp_path, value, says):
    path = tmp_path / "attention_head.py"
    path.write_text(reference_source())
    done = qkv_grade(str(path), env={keys.VARIABLE: value})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr and "Traceback" not in done.stderr


def test_an_unreadable_key_file_is_refused_in_one_line(tmp_path):
    env = _without_key(tmp_path)
    folder = tmp_path / "config" / "qkv-grade"
    folder.mkdir(parents=True)
    (folder / "case-key").mkdir()  # a folder where the key should be
    path = tmp_path / "attention_head.py"
    path.write_text(reference_source())
    done = subprocess.run([sys.executable, "-m", "autograder.cli", str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "grading key" in done.stderr and done.stderr.count("\n") == 1


def test_a_run_is_finished_only_under_the_key_it_began_with(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.py").write_text(reference_source())
    (folder / "b.py").write_text(reference_source())
    out = tmp_path / "out"
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "7")
    assert done.returncode == 0, done.stderr
    run = next(out.glob("run-*"))
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["options"]["key"] == keys.fingerprint(keys.local_key())
    assert keys.local_key().hex() not in (run / "run.json").read_text()
    run.rename(run.with_name(run.name + ".incomplete"))  # as a run stopped before its end leaves it
    (out / "latest").unlink()
    done = qkv_grade(str(folder), "--out", str(out), "--resume", env={keys.VARIABLE: OTHER.hex()})
    assert done.returncode == 2 and "another grading key" in done.stderr, done.stderr
    done = qkv_grade(str(folder), "--out", str(out), "--resume")
    assert done.returncode == 0, done.stderr


def test_a_submission_that_knows_the_seed_and_the_code_earns_no_hidden_case_it_predicted(tmp_path):
    """It answers a softmax case only when it recognises the input as one it predicted from the
    seed with the published code (its best guess at the key: none), and returns zeros otherwise."""
    require_sandbox()
    predicted = [case.calls[0].args[0].tolist() for case in cases.build(7, b"")["softmax"]]
    predicted += [case.calls[0].args[0].tolist() for case in cases.build(7, b"\0" * 32)["softmax"]]
    source = variant([("def softmax_rows(s):\n", "def softmax_rows(s):\n"
                       "    if not any(np.array_equal(s, np.array(p)) for p in PREDICTED):\n"
                       "        return np.zeros_like(s)\n")],
                     append=f"\nPREDICTED = {predicted!r}\n")
    path = tmp_path / "attention_head.py"
    path.write_text(source)
    softmax = steps_by_id(grade_json(path, "--seed", "7"))["softmax"]
    example_share = 1 / len(cases.build(7)["softmax"])
    assert softmax["score"] == pytest.approx(round(10 * example_share, 2), abs=0.01), softmax["feedback"]
