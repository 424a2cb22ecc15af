"""The atlas (autograder/atlas.py): what every model gives on the chapter's example, stored as a
screen. It may only save work: with it or without it, every submission gets the same result."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autograder import atlas, judge
from inprocess import grade
from test_feedback_claims import CORPUS

REPO = Path(__file__).resolve().parents[1]
SEED = 7


def test_the_stored_atlas_equals_a_fresh_computation():
    done = subprocess.run([sys.executable, "-m", "autograder.atlas", "--check"], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is current" in done.stdout


def test_the_atlas_holds_every_steps_example_whatever_the_seed():
    from autograder import cases

    for seed in (0, 7, 123456):
        built = cases.build(seed, bytes(range(32)))
        for step_id, step_cases in built.items():
            for call in (call for case in step_cases if case.public for call in case.calls):
                table = atlas.table(call)
                if call.fn in judge.diagnoses.PIPELINES or judge.derived.models(call.fn):
                    assert table is not None, (seed, step_id, call.fn)
                    assert table.entry((call.fn, "derived", judge.derived.models(call.fn)[0][0])) >= 0


def _results(text: str) -> dict:
    return {step_id: (result.score, result.status, result.diagnoses, result.feedback, result.carried_from)
            for step_id, result in grade(text, SEED).steps.items()}


# Every submission of the feedback-claims corpus (hand-written mistakes, the grammar's, the unlisted,
# the held-out and the fresh ones), in chunks: the screen must never rule out a model the weighing
# would have accepted, nor change which is named first.
_NAMES = sorted(CORPUS)
_CHUNKS = 8


@pytest.mark.parametrize("chunk", range(_CHUNKS))
def test_with_or_without_the_atlas_every_result_is_the_same(chunk, monkeypatch):
    names = _NAMES[chunk::_CHUNKS]
    with_atlas = {name: _results(CORPUS[name]) for name in names}
    assert atlas._load(), "the committed data/example-values.npz should match this checkout"
    monkeypatch.setattr(atlas, "table", lambda call: None)
    judge.forget()
    without = {name: _results(CORPUS[name]) for name in names}
    judge.forget()
    differing = [name for name in names if with_atlas[name] != without[name]]
    assert not differing, differing[:5]


class _Verdict:
    def __init__(self, kind, actual=None, raised=None, message=""):
        self.kind, self.actual, self.raised, self.raised_message = kind, actual, raised, message


def _table(rows: list, layouts: list) -> atlas.Table:
    """A table of the slips ("f", 1, n), one per row of `atlas._entry`."""
    return atlas.Table("f", [[["own", 1], 0, len(rows)]], np.zeros((0, 2), dtype=np.int16),
                       np.array([row[0] for row in rows], dtype=np.int8), np.array([row[1] for row in rows]),
                       np.array([row[2] for row in rows]), np.array([row[3] for row in rows], dtype=np.int64), layouts,
                       np.array([-1 if row[4] is None else layouts.index(row[4]) for row in rows], dtype=np.int16),
                       np.array([row[5] for row in rows]), np.array([row[6] for row in rows]))


def _ruled_out(table: atlas.Table, verdict) -> list[bool]:
    mask = table.excluded(verdict)
    return [bool(mask[n]) for n in range(table.status.size)]


def test_a_value_within_the_model_tolerance_is_never_ruled_out_and_a_far_one_is():
    rng = np.random.default_rng(0)
    want = {"o": rng.normal(size=(3, 4))}
    models = [{"o": want["o"] + rng.normal(size=(3, 4))} for _ in range(50)]
    rows = [atlas._entry(model, None, False, True) for model in models]
    table = _table(rows, [rows[0][4]])
    for n, model in enumerate(models):
        # the student's numbers as close to the model's as agreement allows, in every direction
        edge = judge.MODEL_ATOL + judge.MODEL_RTOL * np.abs(model["o"])
        for signs in (1, -1, rng.choice([-1, 1], size=(3, 4))):
            student = {"o": model["o"] + 0.999 * signs * edge}
            assert judge._agrees_canonical(student, model)
            assert not _ruled_out(table, _Verdict("mismatch", student))[n]
        far = {"o": model["o"] + 1e-3}
        assert not judge._agrees_canonical(far, model)
        assert _ruled_out(table, _Verdict("mismatch", far))[n]
    # another shape, or NaN: only what the screen cannot describe is left to be run
    assert all(_ruled_out(table, _Verdict("mismatch", {"o": np.zeros((4, 3))})))
    assert all(_ruled_out(table, _Verdict("mismatch", {"o": np.full((3, 4), np.nan)})))


def test_a_model_that_departs_from_the_example_is_ruled_out_where_the_student_was_right():
    want = {"o": np.arange(6.0).reshape(2, 3)}
    same = atlas._entry(dict(want), None, False, False)
    departs = atlas._entry({"o": want["o"] + 1}, None, False, True)
    raises = atlas._entry(None, ("ValueError", "shapes (2,3) and (2,3) not aligned"), False, False)
    rows = [same, departs, raises]
    table = _table(rows, [same[4]])
    assert _ruled_out(table, _Verdict("ok")) == [False, True, True]
    # where the student raised: only that very exception may be theirs
    assert _ruled_out(table, _Verdict("raised", raised="ValueError",
                                      message="shapes (2,3) and (2,3) not aligned")) == [True, True, False]
    assert _ruled_out(table, _Verdict("raised", raised="ValueError", message="another")) == [True, True, True]
    # a wrong value: never the reference's own, never an exception
    assert _ruled_out(table, _Verdict("mismatch", {"o": want["o"] + 1})) == [True, False, True]
    assert table.entry(("f", 1, 2)) == 2 and table.entry(("f", 2, 0)) == -1 and table.entry(("f", 1, 3)) == -1
    assert table.entry(("g", 1, 0)) == -1 and table.entry(("carried", "f", "g", 1, 0)) == -1


@pytest.mark.parametrize("stored", ["another digest", "not a file", "missing"])
def test_an_atlas_that_does_not_match_is_ignored(tmp_path, monkeypatch, stored):
    import io
    import json

    path = tmp_path / "example-values.npz"
    if stored == "another digest":
        with np.load(atlas.ATLAS, allow_pickle=False) as kept:
            arrays = {name: kept[name] for name in kept.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode())
        meta["digest"] = "0" * 64
        out = io.BytesIO()
        np.savez(out, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        path.write_bytes(out.getvalue())
    elif stored == "not a file":
        path.write_bytes(b"PK\x03\x04 not really")
    monkeypatch.setattr(atlas, "ATLAS", path)
    atlas._load.cache_clear()
    atlas._table.cache_clear()
    atlas.forget()
    try:
        assert atlas._load() == {}
        from autograder import cases

        assert atlas.table(cases.build(SEED, bytes(32))["scores"][0].calls[0]) is None
    finally:
        monkeypatch.undo()
        atlas._load.cache_clear()
        atlas._table.cache_clear()
        atlas.forget()


def test_what_the_screen_cannot_be_sure_of_it_never_rules_out():
    want = {"o": np.ones((2, 2))}
    # a model within ten times the grading tolerance of the reference: another build of numpy might
    # round it to the other side, so neither "it departs" nor "it is the reference's" is relied on
    near = atlas._entry({"o": want["o"] + 3e-9}, None, False, True, sure=False)
    huge = atlas._entry({"o": np.full((2, 2), 1e308)}, None, False, True)
    overflowed = atlas._entry({"o": np.full((2, 2), np.inf)}, None, False, True)
    assert huge[0] == atlas.OTHER and overflowed[0] == atlas.NONFINITE
    rows = [near, huge, overflowed]
    table = _table(rows, [near[4]])
    assert _ruled_out(table, _Verdict("ok")) == [False, True, True]  # the huge one surely departs
    assert _ruled_out(table, _Verdict("mismatch", {"o": want["o"] + 5})) == [False, False, False]
    # a student's own numbers whose sums overflow: the signature says nothing, so nothing is ruled out
    assert table.excluded(_Verdict("mismatch", {"o": np.full((2, 2), -1.7e308)})) is None
    # OverflowError stands for numbers that overflowed, departing from the reference or not
    assert _ruled_out(table, _Verdict("raised", raised="OverflowError", message="math range error")) \
        == [False, False, False]
    assert _ruled_out(table, _Verdict("raised", raised="ValueError", message="x")) == [False, False, True]
