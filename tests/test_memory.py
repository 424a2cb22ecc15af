"""The grader's memory does not grow with the class.

A folder run writes each result out as it is graded and holds none of them: the listing and the
summary read them back one at a time. The judge's class-wide caches of model values grow with the
distinct mistakes a class shows, and are bounded; emptying them changes no verdict. Both are
checked by counting, never by timing or by the machine's memory figures, so neither is noisy.
(benchmarks/bench_grade.py prints the grader's peak memory for classes of 200 and 5 000.)
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from submissions.realistic import MISTAKES
from submissions.variants import CORRECT
from support import REPO, reference_source

# Runs qkv-grade in this process; when the listing of the class begins (every result graded and
# written), counts the results still alive, then reports them, the largest number of bytes the
# judge's caches held (as it counts them) as a step began, and how many times they were emptied.
# argv[1] bounds those caches in bytes ("default" keeps the grader's own bound).
_COUNTING = """
import gc, json, sys
from autograder import cli, judge, results

if sys.argv[1] != "default":
    judge._MOST_BYTES = int(sys.argv[1])
seen = {"live": [], "most_held": 0, "emptied": 0}
forget = judge.forget
def counted_forget():
    seen["emptied"] += 1
    forget()
judge.forget = counted_forget
listing = results.json_lines
def counting(graded):
    gc.collect()
    seen["live"].append(sum(isinstance(o, (results.SubmissionResult, results.StepResult)) for o in gc.get_objects()))
    return listing(graded)
results.json_lines = counting
grade_step = judge._grade_step
def watched(*args):
    # as a step begins: the caches are emptied between steps, never under one (see judge._step_running)
    seen["most_held"] = max(seen["most_held"], judge.held())
    return grade_step(*args)
judge._grade_step = watched
code = cli.main(sys.argv[2:])
sys.stdout.flush()
sys.stderr.write("counted " + json.dumps(seen) + "\\n")
sys.exit(code)
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Forty submissions, four in five with a mistake."""
    root = tmp_path_factory.mktemp("memory")
    mistakes = [submission.text() for _, submission in sorted(MISTAKES.items())]
    correct = [reference_source()] + [submission.text() for _, submission in sorted(CORRECT.items())]
    for index in range(40):
        text = correct[index // 5 % len(correct)] if index % 5 == 4 else mistakes[index * 7 % len(mistakes)]
        (root / "in").mkdir(exist_ok=True)
        (root / "in" / f"student{index:02d}.py").write_text(text)
    return root


def _run(folder, bound: str, *options: str) -> tuple[list, dict]:
    done = subprocess.run([sys.executable, "-c", _COUNTING, bound, str(folder / "in"), "--format", "json",
                           "--seed", "3", "--out", str(folder / f"out-{bound.replace('/', '-')}"), *options],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stderr.rpartition("counted ")[2])
    return json.loads(done.stdout), counted


def test_a_folder_run_holds_no_result_once_written(folder):
    graded, counted = _run(folder, "default")
    assert len(graded) == 40
    # when the listing begins, all forty are graded and written: none is held in memory
    assert counted["live"] == [0]


def test_the_caches_are_bounded_in_bytes_and_change_no_verdict(folder):
    graded, counted = _run(folder, str(1 << 30))  # never emptied: the verdicts of caches kept whole
    assert counted["emptied"] == 0 and counted["most_held"] > 64 << 10  # more than the bound below
    # one grading thread: as a step begins what the caches hold is under the bound (with two, the
    # other thread's step under way may add to them between the barrier and the reading)
    small, counted = _run(folder, str(64 << 10), "--jobs", "1")  # emptied every few submissions
    assert counted["emptied"] >= 5
    assert counted["most_held"] < 64 << 10
    assert small == graded


def test_what_the_caches_hold_is_counted_with_its_python_objects():
    """The bound is on memory, not on the numbers alone: a value of a few small arrays counts its
    objects too, so many small values fill the caches as surely as a few large ones."""
    import numpy as np

    from autograder import judge

    judge.forget()
    small = {"out": np.zeros((2, 2))}
    judge._shared(small)
    assert judge.held() >= small["out"].nbytes + judge._ARRAY_BYTES + judge._VALUE_BYTES
    before = judge.held()
    judge.allclose(np.ones(3), np.ones(3), 1e-9, 1e-12)  # keeps the tolerance of its `want`
    assert judge.held() >= before + 3 * 8 + judge._ARRAY_BYTES
    judge.forget()
    assert judge.held() == 0


def test_the_caches_are_never_emptied_under_a_step_being_graded(monkeypatch):
    """Caches found full wait until no step is being graded, in this thread or another, to be
    emptied, and a step asked to begin meanwhile waits for it."""
    import threading

    from autograder import judge

    events, full = [], [False]
    monkeypatch.setattr(judge, "_full", lambda: full[0])

    def emptied():
        events.append("emptied")
        full[0] = False

    monkeypatch.setattr(judge, "forget", emptied)
    first_in, first_may_end = threading.Event(), threading.Event()

    def first():
        with judge._step_running():
            events.append("first begins")
            first_in.set()
            first_may_end.wait(10)
            events.append("first ends")

    def second():
        with judge._step_running():
            events.append("second begins")

    one = threading.Thread(target=first)
    one.start()
    assert first_in.wait(10)
    full[0] = True  # as the first step's model values fill the caches
    two = threading.Thread(target=second)
    two.start()
    two.join(0.5)
    assert two.is_alive() and events == ["first begins"]  # the second waits; nothing emptied yet
    first_may_end.set()
    one.join(10)
    two.join(10)
    assert events == ["first begins", "first ends", "emptied", "second begins"]
    assert full == [False] and judge._RUNNING == [0]


WRONG_TYPES = '''

import functools as _functools


def _wrong_value(result):
    """Every value of the right type, its numbers 1.5 off (the predicate's answer turned over)."""
    if isinstance(result, np.ndarray) and result.dtype.kind == "f":
        return result + 1.5
    if isinstance(result, tuple):
        return tuple(_wrong_value(part) for part in result)
    if isinstance(result, dict):
        return {name: _wrong_value(part) for name, part in result.items()}
    if isinstance(result, (bool, np.bool_)):
        return not result
    return result


def _wrong_type(result):
    """Every value of the wrong type: an extra part in each tuple, a pair for an array, a dict's
    values as a tuple, an array of bools for the predicate's answer."""
    if WRONG == "value":
        return _wrong_value(result)
    extra = np.full(3, 1.5)
    if isinstance(result, np.ndarray) and result.dtype.kind == "f":
        return result, extra
    if isinstance(result, tuple):
        return tuple(result) + (extra,)
    if isinstance(result, dict):
        return tuple(result.values()) + (extra,)
    if isinstance(result, (bool, np.bool_)):
        return np.array([bool(result), False])
    return result


_depth = [0]


def _outermost(f):
    @_functools.wraps(f)
    def wrapped(*args):
        _depth[0] += 1
        try:
            result = f(*args)
        finally:
            _depth[0] -= 1
        return result if _depth[0] else _wrong_type(result)
    return wrapped


for _name in ("project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head",
              "zero_query_mixture", "is_attention_weights", "column_normalized_counterexample", "shifted_output",
              "output_change", "head_facts", "value_intervention"):
    globals()[_name] = _outermost(globals()[_name])
'''


# How many times the judge runs a model on a call, grading one submission in a process of its own
# (so that nothing an earlier test left in a cache counts).
COUNT_RUNS = """
import sys
sys.path.insert(0, sys.argv[1])
import inprocess
from autograder import judge
runs, outcome = [0], judge._outcome
def counted(*args):
    runs[0] += 1
    return outcome(*args)
judge._outcome = counted
graded = inprocess.grade(sys.stdin.read())
print(runs[0], graded.steps["softmax"].status)
"""


def test_values_of_the_wrong_type_cost_the_judge_no_more_than_a_wrong_value():
    """A value of the wrong type is explained only by a model that returns the very same object:
    each model is weighed until the first call it does not reproduce, as for a wrong value. Weighed
    on every call, every model, a submission of wrong types everywhere cost the grader seconds: ten
    times what wrong values everywhere cost."""
    costs = {}
    for kind in ("value", "type"):
        source = reference_source() + WRONG_TYPES.replace("\n\nimport", f"\n\nWRONG = {kind!r}\nimport", 1)
        done = subprocess.run([sys.executable, "-c", COUNT_RUNS, str(REPO / "tests")], input=source, text=True,
                              capture_output=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs, status = done.stdout.split()
        assert status != "passed", kind
        costs[kind] = int(runs)
    assert costs["type"] <= 3 * costs["value"], costs


def test_forgetting_the_caches_forgets_the_pairs_of_edits_made_for_the_class_too():
    """The models of pairs of derived edits are made as a class meets them; kept past `forget`, a
    class whose mistakes reach many pairs would hold them all, outside the caches' bound."""
    from autograder import derived, judge

    fn, edits = "softmax_rows", [edit for _, edit in derived.pairable("softmax_rows")]
    first, second = next((one, other) for one in edits for other in edits if one.at < other.at)
    derived.model(derived.pair_code(first.code, second.code))
    assert derived._pair.cache_info().currsize and derived._pair_model.cache_info().currsize, fn
    judge.forget()
    assert derived._pair.cache_info().currsize == derived._pair_model.cache_info().currsize == 0
