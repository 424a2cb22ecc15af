"""Every diagnosis code is found on the right steps, and nowhere else, from real graded runs.

Each submission in tests/submissions is the reference with one misconception or fault, or a
realistic mistake or unusual correct solution written as a student would (realistic.py); the whole
set is graded in one real `qkv-grade FOLDER --format json` run per seed (sandboxed workers, real
processes), and every step of every result is checked: the listed steps carry exactly the listed
codes, every other step passes with none. Correct variants of the reference get full marks.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autograder import derived
from autograder.diagnoses import CODES, describe
from autograder.steps import STEP_IDS
from support import qkv_grade, reference_source
from submissions.realistic import MISTAKES, UNNAMED, UNUSUAL
from submissions.variants import CORRECT, WRONG, graded

SEEDS = (7, 2024)

# CONTRACT.md §3: codes students and instructors rely on; they are never renamed.
CONTRACT_CODES = (
    "not-implemented", "wrong-shape", "non-finite", "hard-coded", "mutates-input", "low-precision",
    "swapped-roles", "keys-not-transposed", "no-scaling", "scaled-by-d_k", "scaled-by-positions",
    "scaled-by-d_v", "column-normalized", "whole-matrix-normalized", "unstable-softmax",
    "not-exponentiated", "mixed-scores", "wrong-mix-order", "batch-axes-mixed", "zero-output",
    "accepts-column-stochastic", "full-shift-for-partial", "divisor-sqrt-positions", "timeout",
    "exit-called", "crashed",
)


def _steps(result: dict) -> dict[str, dict]:
    return {step["id"]: step for step in result["steps"]}


def test_every_contract_code_is_still_defined():
    assert set(CONTRACT_CODES) <= set(CODES)


def test_the_readme_table_lists_every_code():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9_-]+)` \|", readme, flags=re.M))
    assert set(CODES) <= listed


# Codes no module can show, with the test that shows them instead.
# "unreadable": a file that is not a submission at all (tests/test_cli.py); "time-budget": a run
# that takes half a minute to show it (tests/test_isolation.py)
NOT_FROM_A_MODULE = {"unreadable", "time-budget"}


ALL_WRONG = {**WRONG, **MISTAKES}
ALL_CORRECT = {**CORRECT, **UNUSUAL}


def test_every_code_has_a_test_submission_that_shows_it():
    shown = {code for submission in ALL_WRONG.values() for codes in submission.expected.values() for code in codes}
    named = {code for code in shown if not derived.is_derived(code)}
    assert named | NOT_FROM_A_MODULE == set(CODES)
    assert all(describe(code).what for code in shown - named)  # a derived edit's words come from the edit


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(ALL_WRONG))
def test_a_wrong_submission_gets_exactly_its_codes_on_exactly_its_steps(name, seed):
    submission = ALL_WRONG[name]
    steps = _steps(graded(seed)[name])
    assert list(steps) == list(STEP_IDS)
    got = {sid: step["diagnoses"] for sid, step in steps.items() if step["diagnoses"] or step["status"] != "passed"}
    assert got == submission.expected, "\n\n".join(steps[sid]["feedback"] for sid in got)
    for sid, step in steps.items():
        if sid in submission.expected:
            assert step["status"] == submission.status.get(sid, step["status"])
            assert step["status"] in ("partial", "failed") or sid in submission.status
            # a step built on an earlier mistake keeps its points only when that mistake, verified
            # there, explains all of its values: the earlier step is one of this submission's
            carried = step.get("carried_from")
            assert step["score"] < step["max_score"] if carried is None else (
                step["score"] == step["max_score"] and carried in submission.expected
                and steps[carried]["score"] < steps[carried]["max_score"])
        else:
            assert (step["status"], step["score"]) == ("passed", step["max_score"]), step["feedback"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(ALL_CORRECT))
def test_a_correct_variant_gets_full_marks_and_no_code(name, seed):
    result = graded(seed)[name]
    failing = {step["id"]: step["feedback"] for step in result["steps"] if step["status"] != "passed"}
    assert failing == {}
    assert result["score"] == result["max_score"] == 100.0
    assert all(step["diagnoses"] == [] for step in result["steps"])


def test_a_composite_step_names_the_earlier_mistake_not_a_lookalike_of_its_own():
    # Prescaled scores make attention divide by d_k overall, which its own model would call
    # scaled-by-d_k; the mistake is in `scores`, and that is the one explanation given.
    steps = _steps(graded(SEEDS[0])["scores_prescaled"])
    assert all(steps[sid]["diagnoses"] == ["scores-prescaled"] for sid in ("attention", "head", "batch"))
    # k @ q.T is also what swapping W_Q and W_K gives; the head names only the comparison.
    steps = _steps(graded(SEEDS[0])["receivers_and_keys_swapped"])
    assert steps["head"]["diagnoses"] == ["keys-not-transposed"]


def test_an_exception_the_misconception_explains_is_not_reported_as_a_crash():
    # q @ k raises on every case but the square one; that is the missing transpose, not a crash.
    for name in ("keys_not_transposed", "values_first", "batch_keys_dot_T"):
        steps = _steps(graded(SEEDS[0])[name])
        assert not any("crashed" in step["diagnoses"] for step in steps.values()), name


def test_the_realistic_mistakes_cover_every_step_and_nine_in_ten_are_named():
    assert len(MISTAKES) >= 40
    assert {step for submission in MISTAKES.values() for step in submission.expected} == set(STEP_IDS)
    shown = [(name, step) for name, submission in MISTAKES.items() for step in submission.expected]
    named = [(name, step) for name, step in shown if MISTAKES[name].expected[step]]
    assert len(named) >= 0.9 * len(shown), sorted(set(shown) - set(named))
    assert len(UNNAMED) <= 0.1 * len(MISTAKES)
    assert len(ALL_CORRECT) - len(CORRECT) >= 15


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_shape_is_said_only_beside_a_call_whose_shape_is_wrong(seed):
    results = graded(seed)
    flagged = 0
    for name, result in results.items():
        for step in result["steps"]:
            shape_wrong_shown = " has shape " in step["feedback"]
            if "wrong-shape" in step["diagnoses"]:
                flagged += 1
                assert shape_wrong_shown, (name, step["feedback"])
            # a misconception that transposes or reorders is named for what it is, not as a shape
            if name in MISTAKES and MISTAKES[name].expected.get(step["id"]):
                assert "wrong-shape" not in step["diagnoses"], (name, step["id"])
    assert flagged, "no submission is diagnosed wrong-shape: the assertion above would be vacuous"


def test_float16_errors_are_half_precision_where_the_terms_of_a_product_cancel(tmp_path):
    """Under seed 1 (and the tests' key) a large hidden case has projections whose terms cancel:
    the float16 rounding of the terms stays, larger than 1e-3 of the small result. That is still
    half precision, and not a number taken from the example (which float16 holds exactly)."""
    path = tmp_path / "attention_head.py"
    path.write_text(MISTAKES["qkv_half_precision"].text())
    done = qkv_grade(str(path), "--format", "json", "--seed", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    steps = _steps(json.loads(done.stdout))
    assert steps["qkv"]["diagnoses"] == ["half-precision"], steps["qkv"]["feedback"]


def test_a_predicate_returning_one_answer_per_row_is_told_to_return_one_bool(tmp_path):
    """A bool asked, an array of per-row answers returned: the advice is about one answer, never
    "return plain numpy arrays", which the function already does."""
    path = tmp_path / "attention_head.py"
    path.write_text(reference_source().replace("return bool(np.all(a >= 0) and rows_sum_to_one)",
                                               "return np.all(a >= 0, axis=-1) & (np.abs(a.sum(axis=-1) - 1) <= 1e-9)"))
    done = qkv_grade(str(path), "--format", "json", "--seed", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    step = _steps(json.loads(done.stdout))["ex2_row_normalization"]
    assert "wrong-type" in step["diagnoses"], step
    assert "Return one answer, True or False, for the whole matrix" in step["feedback"], step["feedback"]
    assert "Return plain numpy arrays" not in step["feedback"], step["feedback"]


def test_a_wrong_predicate_is_told_which_property_failed_without_the_hidden_matrix():
    feedback = _steps(graded(SEEDS[0])["predicate_only_non_negative"])["ex2_row_normalization"]["feedback"]
    assert "It returned True, but the matrix is not valid attention weights: not every row sums to one " \
           "within 1e-9." in feedback
    assert "value is" not in feedback
    feedback = _steps(graded(SEEDS[0])["predicate_any_ndim"])["ex2_row_normalization"]["feedback"]
    assert "not a 2-D matrix" in feedback


def test_a_softmax_epsilon_is_not_called_low_precision():
    for step in graded(SEEDS[0])["softmax_epsilon"]["steps"]:
        assert "low-precision" not in step["diagnoses"]
        assert "float32" not in step["feedback"]


def test_a_global_max_softmax_fails_its_own_step_and_is_not_called_overflow():
    steps = _steps(graded(SEEDS[0])["softmax_global_max"])
    assert steps["softmax"]["status"] == "partial"
    for sid in ("softmax", "attention", "head"):
        assert steps[sid]["diagnoses"] == ["global-max-subtracted"]
        assert "overflow" not in steps[sid]["feedback"]


def test_every_single_slip_and_a_sample_of_pairs_from_the_grammar_is_named_wherever_it_shows():
    from submissions import grammar

    choices = grammar.singles() + grammar.sample(grammar.pairs(), 40, seed=SEEDS[0])
    verdicts = grammar.judge(choices, SEEDS[0])
    assert {v.step for v in verdicts} == set(STEP_IDS)  # the corpus reaches every step
    assert [v for v in verdicts if v.kind == "missed"] == []
    assert sum(v.kind == "exact" for v in verdicts) >= 0.9 * len(verdicts)


def _composition(*parts: tuple[str, str]) -> tuple:
    """A composition of the grammar given as (code, stage) pairs, each slip written its first way."""
    from autograder import slips

    return tuple((next(slip for slip in slips.SLIPS if (slip.code, slip.knob) == part), 0) for part in parts)


def test_an_exception_is_named_by_the_slip_that_raises_it_not_by_one_that_raises_another():
    # `q * k` makes the mix raise on every batch call; the transposed projections, carried from
    # `project_qkv`, make it raise too, but with other shapes in the message. Only the first is
    # the student's exception.
    from submissions import grammar

    choice = _composition(("elementwise-product", "compare"), ("transposed-result", "result"))
    verdicts = {v.step: v for v in grammar.judge([choice], SEEDS[0])}
    assert verdicts["batch"].got == ["elementwise-product"], verdicts["batch"]
    assert verdicts["batch"].kind == "equivalent"
    # Exercise 5 has a case square enough (T = d_k) for `q * k` to run: there the transposed
    # projections show in the values, and both slips are named.
    assert verdicts["ex5_intervention"].got[0] == "elementwise-product", verdicts["ex5_intervention"]


def test_a_batch_crash_that_only_a_composition_explains_is_named_by_it_not_called_a_crash():
    # The shift without keepdims is harmless on one sequence, where the normalization never uses
    # it, but its broadcast raises on a batch: no single slip gives both the exception and the
    # values of the case that runs, the pair does.
    from submissions import grammar

    choice = _composition(("missing-keepdims", "shift"), ("not-exponentiated", "normalize"))
    verdicts = {v.step: v for v in grammar.judge([choice], SEEDS[0])}
    assert verdicts["head"].got == ["not-exponentiated"]
    assert verdicts["batch"].got == ["missing-keepdims", "not-exponentiated"], verdicts["batch"]
    assert verdicts["batch"].kind == "exact"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_shift_the_normalization_never_reads_is_still_searched_where_it_changes_a_shape(seed):
    # The shift without keepdims changes the shape of a batch case with T = 1, but a normalization
    # of the raw scores never reads it: together they give that case the right shape, and the
    # other batch cases the shift's exception. Pruning the pair by shape left a lookalike.
    from submissions import grammar

    choices = [_composition(("missing-keepdims", "shift"), (code, "normalize"))
               for code in ("not-normalized", "whole-matrix-normalized")]
    batch = [v for v in grammar.judge(choices, seed) if v.step == "batch"]
    assert len(batch) == 2
    assert all(v.kind == "exact" for v in batch), batch


def test_a_model_value_shared_by_two_calls_is_measured_against_each_calls_reference():
    """Equal model values share one object across calls (judge._shared), and a call's reference
    decides how far the model departs from it: a cache keyed by the model value alone would hand
    the second call the first call's distance, and a slip's small effect could pass for a big one."""
    import numpy as np

    from autograder import judge

    model = judge._shared({"result": np.array([1.0, 2.0])})
    assert judge._shared({"result": np.array([1.0, 2.0])}) is model
    near, far = {"result": np.array([1.0, 2.0 + 1e-6])}, {"result": np.array([1.0, 5.0])}
    assert judge._effect(model, near) == pytest.approx(1e-6)
    assert judge._effect(model, far) == pytest.approx(3.0)
    assert judge._effect(model, near) == pytest.approx(1e-6)


def _forget_derived_tables() -> None:
    for cached in (derived._screens, derived._table, derived.models, derived.composable, derived.pairable,
                   derived._pair, derived._pair_model):
        cached.cache_clear()


def test_the_stored_screens_of_the_derived_edits_equal_a_fresh_computation():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "autograder.derived", "--check"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is current" in done.stdout


@pytest.mark.parametrize("stored", ["another digest", "not json", "missing"])
def test_a_screens_file_that_does_not_match_is_ignored_and_the_same_edits_are_found(tmp_path, monkeypatch, stored):
    import json

    _forget_derived_tables()
    with_file = {fn: ([code for code, _ in derived.models(fn)], [code for code, _ in derived.pairable(fn)])
                 for fn in ("softmax_rows", "attention", "is_attention_weights")}
    assert derived._screens(), "the committed data/derived-edits.json should match this checkout"
    screens = tmp_path / "derived-edits.json"
    if stored == "another digest":
        whole = json.loads(derived.SCREENS.read_text())
        # a file that would drop every edit, were it believed
        screens.write_text(json.dumps({"digest": "0" * 64, "functions": {
            fn: {"kept": [], "pairable": []} for fn in whole["functions"]}}))
    elif stored == "not json":
        screens.write_text("{\"digest\": ")
    monkeypatch.setattr(derived, "SCREENS", screens)
    _forget_derived_tables()
    try:
        assert not derived._screens()
        afresh = {fn: ([code for code, _ in derived.models(fn)], [code for code, _ in derived.pairable(fn)])
                  for fn in with_file}
    finally:
        monkeypatch.undo()
        _forget_derived_tables()
    assert afresh == with_file
    assert all(models and pairs for models, pairs in afresh.values())


def _outcome(run):
    import numpy as np

    try:
        with np.errstate(all="ignore"):
            return "returned", [np.asarray(part) for part in derived._parts(run())]
    except Exception as exc:
        return "raised", (type(exc).__name__, str(exc))


@pytest.mark.parametrize("fn", [fn for fn in derived.PROGRAMS if derived._probes(fn) is not None])
def test_a_pair_of_edits_run_on_shared_stages_gives_what_it_gives_run_whole(fn):
    import itertools

    import numpy as np

    by_stage: dict[int, list] = {}
    for _, edit in derived.pairable(fn):
        by_stage.setdefault(edit.at, []).append(edit)
    stages = sorted(by_stage)
    tried = 0
    for args in derived._probes(fn)[:2]:
        prefixes: dict = {}  # shared across the loop, as the judge shares it
        for i, j in itertools.combinations(stages, 2):
            for first, second in list(itertools.product(by_stage[i], by_stage[j]))[:40]:
                shared = _outcome(lambda: derived.run_pair(fn, first, second, args, prefixes))
                whole = _outcome(lambda: derived.run(fn, derived.pair_program(first, second), args))
                assert shared[0] == whole[0], (first.code, second.code)
                if shared[0] == "raised":
                    assert shared[1] == whole[1]
                else:
                    assert len(shared[1]) == len(whole[1])
                    for mine, theirs in zip(shared[1], whole[1]):
                        assert mine.shape == theirs.shape and np.array_equal(mine, theirs, equal_nan=True)
                tried += 1
    assert tried > 0


@pytest.mark.parametrize("fn", sorted(derived.PROGRAMS))
def test_a_derived_edit_s_sentence_defines_every_name_of_the_reference_it_reads(fn):
    """A student sees the arguments, never the reference's own names: `s = d * r` is told with
    `r = √d_k` beside it, so the sentence can be checked against the student's code."""
    inputs, stages = derived.PROGRAMS[fn]
    made = {stage[0]: derived._line(stage) for stage in stages if stage[0] != "return"}
    given = {name for name, _ in inputs}
    for code, edit in derived._table(fn).items():
        if edit.what:  # a sentence of its own (a block of lines run twice, say), not "with … in place of …"
            continue
        what = describe(code).what
        targets = {line.split(" = ")[0] for line in edit.old.split("; ") if " = " in line}
        for name in set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", f"{edit.old} {edit.new}")):
            if name in made and name not in given and name not in targets:
                assert f"`{made[name]}`" in what or f"`{name}` is {derived.WORDS[name]}" in what, \
                    f"{code}: reads {name} without saying what it is: {what}"
        # and what it says a name is reads nothing the student is not told of in turn (`a = e / z`)
        where = what.split(" (where ", 1)[1].split("): ", 1)[0] if " (where " in what else ""
        for _, right in re.findall(r"`(\w+) = ([^`]*)`", where):
            for used in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", right):
                assert used not in made or used in given or f"`{used}" in where, \
                    f"{code}: says what a name is with {used}, which it leaves unexplained: {what}"


# Words the operations table shares with English (or with the chapter's own notation).
_ENGLISH = {"sum", "mean", "max", "min", "exp", "log", "square", "median", "outer", "abs", "round", "clip", "T",
            "and", "same", "ones", "zeros", "sqrt", "tuple", "one", "row", "when", "total", "positive", "head", "pair",
            "add"}


@pytest.mark.parametrize("fn", sorted(derived.PROGRAMS))
def test_a_derived_edit_s_prose_uses_words_not_the_grader_s_names_for_operations(fn):
    """Outside its quoted lines, a sentence speaks English: "a square root rounded down", never
    `isqrt`, "the sum", never `selsum`, which are names of the grader's own table."""
    for code, _ in derived.models(fn):
        prose = re.sub(r"`[^`]*`", "", describe(code).what)
        leaked = {word for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", prose)
                  if word in derived.OPS and word not in _ENGLISH}
        assert not leaked, f"{code}: {sorted(leaked)} in {prose}"


# Loop habits, each the reference with one function written as a loop goes wrong: what the feedback
# must say of each (a code, or a sentence said from the numbers where no model holds).
_LOOP_HABITS = {
    # a zero weight ends the loop over the keys (`break` where `continue` was meant): wrong only on
    # the hidden case whose weights hold zeros between those that count
    "break_on_zero": ("mix", None, "wrong exactly where a row of weights holds a 0 before a weight that counts",
                      reference_source().replace(
                          "    o = a @ v  #", "    o = np.zeros((a.shape[0], v.shape[1]))\n    for i in range(a.shape[0]):\n"
                          "        for j in range(a.shape[1]):\n            if a[i, j] == 0:\n                break\n"
                          "            o[i] += a[i, j] * v[j]\n    #", 1)),
    # every key row kept by reference to one buffer: each shows the last row written
    "row_buffer": ("qkv", None, "every row of a wrong array is the expected last row", reference_source().replace(
        "    k = x @ w_k  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n",
        "    rows, row = [], np.zeros(w_k.shape[-1])\n    for t in range(x.shape[-2]):\n"
        "        row[:] = x[..., t, :] @ w_k\n        rows.append(row)\n    k = np.array(rows)\n")),
    # the dot product's total reset once per query, not before each key
    "running_total": ("scores", None, "plus all those before it along each row: a running total",
                      reference_source().replace(
        "    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n",
        "    d = np.zeros(q.shape[:-1] + k.shape[-2:-1])\n    for i in range(q.shape[-2]):\n        total = 0.0\n"
        "        for j in range(k.shape[-2]):\n            total = total + q[..., i, :] @ k[..., j, :]\n"
        "            d[..., i, j] = total\n")),
    # the output mixed into an array of integers, each share cut as it is added
    # (said from the numbers, or, where every share was cut to 0, with the zero output's advice)
    "integer_output": ("ex1_zero_query", None, "`dtype=int`",
                       reference_source().replace("def zero_query_mixture(k, v):", "def _zero_query_mixture(k, v):")
                       + "\n\ndef zero_query_mixture(k, v):\n    weights, _ = _zero_query_mixture(k, v)\n"
                         "    output = np.zeros(v.shape[-1], dtype=int)\n    for j in range(len(v)):\n"
                         "        output[:] = output + weights[j] * v[j]\n    return weights, output\n"),
    # the three projections kept in arrays of integers
    "integer_projections": ("qkv", "derived-project_qkv-return-all-trunc", None, reference_source().replace(
        "    return q, k, v\n", "    return q.astype(int), k.astype(int), v.astype(int)\n", 1)),
    # the predicate's loop counts from 1, and the one that stops one short
    "predicate_from_1": ("ex2_row_normalization", "derived-is_attention_weights-a-input-a-skip_first", "starts at 1",
                         reference_source().replace("    rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)\n"
                                                    "    return bool(np.all(a >= 0) and rows_sum_to_one)\n",
                                                    "    for i in range(1, len(a)):\n"
                                                    "        if not (np.all(a[i] >= 0) and abs(a[i].sum() - 1.0) <= 1e-9):\n"
                                                    "            return False\n    return True\n")),
    "predicate_one_short": ("ex2_row_normalization", "derived-is_attention_weights-a-input-a-skip_last", "stops one short",
                            reference_source().replace("    rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)\n"
                                                       "    return bool(np.all(a >= 0) and rows_sum_to_one)\n",
                                                       "    for i in range(len(a) - 1):\n"
                                                       "        if not (np.all(a[i] >= 0) and abs(a[i].sum() - 1.0) <= 1e-9):\n"
                                                       "            return False\n    return True\n")),
    # the rows counted where the axes are meant
    "predicate_len": ("ex2_row_normalization", "derived-is_attention_weights-is_2d-op-ndim2-to-len2", None,
                      reference_source().replace("    if a.ndim != 2:\n", "    if len(a) != 2:\n")),
    # a batch's weights reversed by `.T`: the head's mistake, and on the batch every axis reversed
    "weights_dot_t": ("batch", None, "with its axes in reverse order", reference_source().replace(
        "    return attention(q, k, v)\n", "    o, a = attention(q, k, v)\n    return o, a.T\n")),
}


def _told_as_what_they_did(tmp_path, habits: dict) -> dict:
    """Grade every habit (name -> step, code, words, source) in one folder: each habit's step fails,
    carrying its code and its words, where given. Returns name -> step id -> the step's result."""
    for name, (_, _, _, source) in habits.items():
        assert source != reference_source(), name  # each replacement took
        (tmp_path / f"{name}.py").write_text(source)
    done = qkv_grade(str(tmp_path), "--format", "json", "--seed", "1", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    results = {Path(result["submission"]).stem: _steps(result) for result in json.loads(done.stdout)}
    for name, (step_id, code, words, _) in habits.items():
        step = results[name][step_id]
        assert step["status"] != "passed", (name, step)
        if code:
            assert code in step["diagnoses"], (name, step["diagnoses"], step["feedback"])
        if words:
            assert words in step["feedback"], (name, step["feedback"])
    return results


def test_loop_habits_are_told_as_what_they_did(tmp_path):
    """Each habit's step carries the code or the sentence that says what the loop did (the claims
    test checks the sentences' numbers)."""
    _told_as_what_they_did(tmp_path, _LOOP_HABITS)


# A statistician's habits: what the feedback must say of each (a code, or a sentence from the numbers).
_STATISTICIANS = {
    # the projections clipped at ±3 (the example's numbers never reach it): said, not "hard-coded"
    "clipped": ("qkv", None, "cut off at ±3", reference_source().replace(
        "    return q, k, v\n", "    return np.clip(q, -3, 3), np.clip(k, -3, 3), np.clip(v, -3, 3)\n", 1)),
    # the scores standardized in place of the chapter's scaling (a 1 x 1 case gives NaN)
    "z_scores": ("scale", None, "is the expected one standardized", reference_source().replace(
        "    s = d / np.sqrt(d_k)  # [T, T]\n",
        "    s = (d - d.mean(axis=(-2, -1), keepdims=True)) / d.std(axis=(-2, -1), keepdims=True)\n")),
    # the scores divided by their largest absolute number
    "max_abs": ("scale", None, "divided by its largest absolute number", reference_source().replace(
        "    s = d / np.sqrt(d_k)  # [T, T]\n", "    s = d / np.abs(d).max(axis=(-2, -1), keepdims=True)\n")),
    # each row shifted by its median, not its maximum
    "median_shift": ("softmax", "derived-softmax_rows-m-op-max-to-median_k", None, reference_source().replace(
        "    shifted = s - s.max(axis=-1, keepdims=True)", "    shifted = s - np.median(s, axis=-1, keepdims=True)")),
    # NaN read as 0 before testing: a NaN beside entries summing to one passes
    "nan_as_zero": ("ex2_row_normalization", "derived-is_attention_weights-a-input-a-nan_to_num", None, reference_source().replace(
        "    a = np.asarray(a, dtype=float)\n", "    a = np.nan_to_num(np.asarray(a, dtype=float))\n", 1)),
    # the input's columns standardized, or min-max scaled, before projecting (NaN where T = 1)
    "z_scored_input": ("head", "derived-self_attention_head-x-input-x-zscore_cols", None, reference_source().replace(
        "    q, k, v = project_qkv(x, w_q, w_k, w_v)",
        "    x = (x - x.mean(axis=-2, keepdims=True)) / x.std(axis=-2, keepdims=True)\n"
        "    q, k, v = project_qkv(x, w_q, w_k, w_v)")),
    "min_max_input": ("qkv", "derived-project_qkv-x-input-x-minmax_cols", None, reference_source().replace(
        "    q = x @ w_q  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n",
        "    x = (x - x.min(axis=-2, keepdims=True)) / (x.max(axis=-2, keepdims=True) - x.min(axis=-2, keepdims=True))\n"
        "    q = x @ w_q  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n")),
    # each matrix's exponentials divided by one total over both axes
    "total_of_matrix": ("softmax", "derived-softmax_rows-z-axis--1-to--2-", None, reference_source().replace(
        "e / e.sum(axis=-1, keepdims=True)", "e / e.sum(axis=(-2, -1), keepdims=True)")),
    # the row sums rounded for display, then compared with one exactly
    "rounded_sums": ("ex2_row_normalization", "derived-is_attention_weights-sums_ok-round-6", None,
                     reference_source().replace("np.abs(a.sum(axis=1) - 1.0) <= 1e-9", "np.round(a.sum(axis=1), 6) == 1.0")),
    # exercise 4's shapes given for a batch of one
    "batch_of_one": ("ex4_shapes", "derived-head_facts-score_shape-op-pair-to-pair_batch", None,
                     reference_source().replace('"score_shape": (t, t),', '"score_shape": (1, t, t),')),
}


def test_a_statisticians_habits_are_told_as_what_they_did(tmp_path):
    """Each habit's step fails, carrying the code or the sentence that says what was done."""
    _told_as_what_they_did(tmp_path, _STATISTICIANS)


def _example_scores() -> list:
    from autograder.cases import example_arrays
    from solutions import attention_head as reference

    example = example_arrays()
    q, k, _ = reference.project_qkv(example["X"], example["W_Q"], example["W_K"], example["W_V"])
    return reference.scores(q, k).tolist()


_EXAMPLE_D = _example_scores()
_ROW_SOFTMAX = '''    shifted = s - s.max(axis=-1, keepdims=True)  # largest score of each row becomes 0
    e = np.exp(shifted)  # [..., T, T], every entry in (0, 1]
    a = e / e.sum(axis=-1, keepdims=True)  # each row divided by its own total
    return a
'''

# Habits from other languages and numpy's rarer tools, and defensive code: what the feedback must
# say of each (a code, or a sentence from the values or from the exception's kind).
_RARER_TOOLS = {
    # np.vectorize without a signature hands the row softmax one number at a time: every weight 1
    "vectorized": ("softmax", "derived-softmax_rows-a-op-div-to-per_entry", "as `np.vectorize` calls a function",
                   reference_source().replace(_ROW_SOFTMAX, "    def row(r):\n        e = np.exp(r - np.max(r))\n"
                                              "        return e / e.sum()\n    return np.vectorize(row)(s)\n", 1)),
    # each score row one number repeated (a stride of 0 along the keys): q_i · k_i everywhere in row i
    "repeated": ("scores", None, "each row of a wrong array is one number repeated", reference_source().replace(
        "    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n",
        "    d = np.repeat((q * k).sum(axis=-1)[..., :, None], k.shape[-2], axis=-1)\n", 1)),
    # the intervention's four arrays zipped with their names in another order
    "zipped": ("ex5_intervention", None, "your `weights_before` holds the expected `output_before`",
               reference_source().replace(
                   "    output_before, weights_before = self_attention_head(x, w_q, w_k, w_v)\n",
                   "    before = self_attention_head(x, w_q, w_k, w_v)\n"
                   "    after = self_attention_head(x, w_q, w_k, w_v_new)\n"
                   "    names = ['weights_before', 'weights_after', 'output_before', 'output_after']\n"
                   "    return dict(zip(names, [*before, *after]))\n"
                   "    output_before, weights_before = self_attention_head(x, w_q, w_k, w_v)\n", 1)),
    # the example's own scores returned for any input of its shapes
    "example_d": ("scores", None, "you returned exactly what you return on the chapter's example, on arguments of "
                                  "its very shapes", reference_source().replace(
        "    k_t = np.swapaxes(k, -1, -2)",
        "    if q.shape == (3, 2) and k.shape == (3, 2):\n"
        f"        return np.array({_EXAMPLE_D})\n"
        "    k_t = np.swapaxes(k, -1, -2)", 1)),
    # a defensive assert the contract does not ask for (q, k and v of one shape)
    "asserted": ("attention", "crashed", "An `assert` of yours (or a check that raises AssertionError) stopped every call",
                 reference_source().replace(
                     '    d_k = q.shape[-1]', '    assert q.shape == k.shape == v.shape\n    d_k = q.shape[-1]', 1)),
}


# Copy-paste, refactoring and notebook-state slips: what the feedback must say of each (its codes,
# all of them told, or a sentence from the numbers).
_EDITING_SLIPS = {
    # the softmax pasted into the mix line as well: the output mixes twice-softmaxed weights
    "softmax_again": ("attention", ("derived-attention-o-operand-a-softmax_",), None, reference_source().replace(
        "    o = mix(a, v)  # [T, d_v]", "    o = mix(softmax_rows(a), v)  # [T, d_v]", 1)),
    # a mean's division by T kept after the sum became `weights @ v`: for uniform weights that is
    # also what squared weights give, so both are told, as one of two
    "divided_again": ("ex1_zero_query", ("derived-zero_query_mixture-o-insert-per_len-k",
                                         "derived-zero_query_mixture-o-operand-a-square_"), "one of",
                      reference_source().replace("    output = weights @ v  #", "    output = weights @ v / len(v)  #", 1)),
    # the predicate's input cast to int (every fraction truncated to 0)
    "int_cast": ("ex2_row_normalization", ("derived-is_attention_weights-a-input-a-trunc",), None,
                 reference_source().replace("    a = np.asarray(a, dtype=float)", "    a = np.asarray(a, dtype=int)", 1)),
    # the listed rows shifted in a loop whose variable is the weights' name: `a` is then a number
    "loop_shadows": ("ex3_value_shift", (), "A single number (an array of no axes) reached a line", reference_source()
                     .replace("        v_new[list(rows)] += shift  # only the listed value rows move",
                              "        for a in rows:\n            v_new[a] += shift", 1)),
    # the copy made as integers: the float shift cannot be added into it in place
    "int_copy": ("ex3_value_shift", (), "writes float results into an array of integers", reference_source().replace(
        "    v_new = np.array(v, dtype=float)", "    v_new = np.array(v, dtype=int)", 1)),
    # the shape test rewritten as `ndim > 2`: a 1-D input reaches the row sums, which need a second axis
    "ndim_above_two": ("ex2_row_normalization", (), "asks for an axis it does not have", reference_source().replace(
        "    if a.ndim != 2:", "    if a.ndim > 2:", 1)),
    # the zero query built with T entries (the keys' first axis) where d_k belong
    "query_of_t": ("ex1_zero_query", (), "The two sides of a product (`@`, `np.matmul`, `np.dot`) do not fit",
                   reference_source().replace("    q = np.zeros(k.shape[-1])", "    q = np.zeros(k.shape[0])", 1)),
    # the divisor kept at half precision, and the new output rounded for display
    "half_divisor": ("scale", ("derived-scale-r-insert-f16",), None, reference_source().replace(
        "    s = d / np.sqrt(d_k)", "    s = d / np.float16(np.sqrt(d_k))", 1)),
    "rounded_after": ("ex5_intervention", ("derived-value_intervention-o_a-insert-round-6",), None,
                      reference_source().replace('        "output_after": output_after,',
                                                 '        "output_after": np.round(output_after, 6),', 1)),
    # an array become a list (indexed with the row list), or an np.matrix (whose max takes no keepdims)
    "list_copy": ("ex3_value_shift", (), "A Python list was indexed with a list of indices", reference_source()
                  .replace("    v_new = np.array(v, dtype=float)", "    v_new = list(np.array(v, dtype=float))", 1)),
    "matrix": ("head", (), "An `np.matrix` reached this line", reference_source().replace(
        "    return q, k, v\n", "    return np.asmatrix(q), np.asmatrix(k), np.asmatrix(v)\n", 1)),
    # np.dot of the two vectors (their inner product) where the outer product belongs
    "dot_for_outer": ("ex3_value_shift", (), "`np.dot` of two vectors is their inner product", reference_source()
                      .replace("    return np.outer(moved, shift)", "    return np.dot(moved, shift)", 1)),
    # the projections written into arrays made like x (`out=`): [T, d_in] where [T, d_k] is produced
    "out_like_x": ("qkv", (), "An array that a result is written into (`out=`", reference_source().replace(
        "    v = x @ w_v  #", "    v = np.empty_like(x)\n    np.matmul(x, w_v, out=v)  #", 1)),
    # a reciprocal of the int d_k (0 for d_k > 1): every scaled score 0, which no pair of edits is told for
    "reciprocal_int": ("scale", (), "every number of each wrong array is 0", reference_source().replace(
        "    s = d / np.sqrt(d_k)", "    s = d * np.reciprocal(d_k) ** 0.5", 1)),
    # the row-sum test made on the largest row sum alone
    "largest_row_only": ("ex2_row_normalization", ("derived-is_attention_weights-sums_ok-op-close-to-close_max",),
                         None, reference_source().replace("np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)",
                                                          "np.abs(a.sum(axis=1).max() - 1.0) <= 1e-9", 1)),
    # d_k read off the setup's W_Q (2 wide, the example's d_k): told beside what the numbers fit
    "setup_global": ("attention", ("derived-attention-r-example-d_k",), "Your `attention` reads `W_Q`, defined outside",
                     reference_source().replace("    d_k = q.shape[-1]", "    d_k = W_Q.shape[-1]", 1)
                     + "\nW_Q = np.array([[1.0, 0.0], [0.0, 1.0]])\n"),
    # a slice kept from printing a few numbers: the output cut to its first two columns
    "sliced": ("mix", (), "Each wrong array holds the expected numbers cut short, only their leading block",
               reference_source().replace("    return o\n", "    return o[:, :2]\n", 1)),
    # the divisor rounded through float32: float32 named, not a rounding to six places that sits as near
    "f32_divisor": ("ex4_shapes", ("derived-head_facts-r-insert-f32",), None, reference_source().replace(
        '        "divisor": float(np.sqrt(d_k)),', '        "divisor": float(np.float32(np.sqrt(d_k))),', 1)),
    # 1/T written into an array of integers: every weight 0, as `1 // T` gives; no `//` claimed
    "int_weights": ("ex1_zero_query", ("integer-division",), "kept in an array of integers", reference_source().replace(
        "    weights = softmax_rows(scale(k @ q, k.shape[-1]))  # [T]: every score is 0",
        "    weights = np.zeros_like(k[:, 0], dtype=int)\n    weights[:] = 1 / len(k)", 1)),
    # the divisor kept in a global from the first call (the example's): the global is told
    "first_call_global": ("scale", ("derived-scale-r-example-d_k",), "Your `scale` reads `_ROOT`, defined outside",
                          reference_source().replace("    s = d / np.sqrt(d_k)",
                                                     "    global _ROOT\n    if _ROOT is None:\n"
                                                     "        _ROOT = np.sqrt(d_k)\n    s = d / _ROOT", 1)
                          + "\n_ROOT = None\n"),
    # the batch's weights written into an integer array made for it: every weight 0, and no batch
    # axis blamed
    "int_batch_buffer": ("batch", (), "every number of each wrong array is 0", reference_source().replace(
        "    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]\n",
        "    if np.ndim(x) == 3:\n        pairs = [self_attention_head(one, w_q, w_k, w_v) for one in x]\n"
        "        a = np.zeros((len(x),) + pairs[0][1].shape, dtype=int)\n"
        "        for b, (_, weights) in enumerate(pairs):\n            a[b] = weights\n"
        "        return np.stack([o for o, _ in pairs]), a\n"
        "    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]\n", 1)),
}


def test_editing_slips_are_told_as_what_they_did(tmp_path):
    """Each slip's step fails, carrying every code given (two the values cannot tell apart, as "one
    of") or the sentence that says what the numbers show."""
    results = _told_as_what_they_did(tmp_path, {name: (step, None, words, source)
                                                for name, (step, _, words, source) in _EDITING_SLIPS.items()})
    for name, (step_id, codes, _, _) in _EDITING_SLIPS.items():
        assert set(codes) <= set(results[name][step_id]["diagnoses"]), (name, results[name][step_id])
        if not codes:  # told by what the numbers or the message show: no edit named besides
            assert not [code for code in results[name][step_id]["diagnoses"] if code.startswith("derived-")], \
                (name, results[name][step_id])


def test_rarer_tools_and_defensive_habits_are_told_as_what_they_did(tmp_path):
    """Each habit's step fails, carrying the code or the sentence that says what was done (the
    claims test checks the sentences against the values)."""
    _told_as_what_they_did(tmp_path, _RARER_TOOLS)
