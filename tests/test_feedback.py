"""The feedback a student reads: pinned wording for representative mistakes, and rules for all of it.

Like numpy's tests pin assert_allclose's messages, a few whole messages are pinned here; every
other result of the graded test submissions (tests/submissions) is held to the rules: hidden
cases' expected values never shown, no traceback or grader source, every diagnosis citing a
chapter section, and a composite step whose earlier step is wrong saying so first.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from autograder import cases, derived, feedback, judge
from autograder.diagnoses import CODES, describe
from autograder.steps import BY_ID
from solutions import attention_head as reference
from submissions.variants import WRONG, graded

SEED = 7
AUTOGRADER = Path(judge.__file__).resolve().parent


def step_feedback(name: str, step_id: str) -> str:
    return next(step["feedback"] for step in graded(SEED)[name]["steps"] if step["id"] == step_id)


# ------------------------------------------------------------------ pinned messages -------------

# The example's weights from a column-normalized softmax, and what the diagnosis says about them.
COLUMN_NORMALIZED_WEIGHTS = """\
weights a: mismatched elements: 6 / 9 (66.7%)
  at [0, 0]: got 0.248255, expected 0.401112
  at [0, 2]: got 0.140029, expected 0.401112
  at [1, 1]: got 0.401112, expected 0.248255
  largest absolute difference: 0.261
[column-normalized] You normalized the columns, over receivers; normalize each row, over the \
contributing keys, so every receiving position gets a unit-total mixture.
"""


def test_a_column_normalized_softmax_is_explained_on_the_example():
    assert step_feedback("column_normalized", "softmax") == """\
Normalize each receiving row: 1 of 11 cases pass.
Called softmax_rows(s [3, 3]) on the chapter's example.
""" + COLUMN_NORMALIZED_WEIGHTS + """\
  Where to look: The softmax runs along the last axis: `axis=-1, keepdims=True` for the maximum and \
the sum. Reread §15.3.
The task: Turn each row of scores into weights over the keys: non-negative, summing to one, and \
finite even for scores in the thousands. Reread §15.3."""


def test_a_composite_step_whose_own_work_checks_out_points_to_the_earlier_mistake_in_two_lines():
    assert step_feedback("column_normalized", "attention") == """\
Scaled dot-product attention: full marks, the error carried forward.
What goes wrong here comes from the mistake in your `softmax` step (column-normalized); with that as you wrote \
it, your own work here checks out on all 9 cases. Fix it there (see above) and this step follows."""


def test_a_composite_step_on_a_mistake_no_model_reproduces_is_verified_by_calling_it_again():
    # float32 arithmetic inside the softmax: no model reproduces it, so the head is called again
    # with the chapter's softmax and attention in place of the student's, and passes
    assert step_feedback("float32_softmax", "head") == """\
One self-attention head: full marks, the error carried forward.
What goes wrong here comes from the mistake in your `softmax` step (low-precision); called again with the chapter's \
`softmax_rows` and `attention` in place of yours, your own work here checks out on all 9 cases. Fix it there \
(see above) and this step follows."""


def test_scores_with_receivers_and_keys_swapped_are_explained_on_the_example():
    assert step_feedback("receivers_and_keys_swapped", "scores") == """\
Compare every receiving row with every key: 1 of 8 cases pass.
Called scores(q [3, 2], k [3, 2]) on the chapter's example.
scores d: mismatched elements: 6 / 9 (66.7%)
  at [0, 1]: got 1, expected 0
  at [0, 2]: got 2, expected 1
  at [1, 0]: got 0, expected 1
  largest absolute difference: 1
[keys-not-transposed] You compared without transposing the keys, or with queries and keys swapped: \
D = Q Kᵀ puts the receiving queries on the rows and the contributing keys on the columns.
  Where to look: Use `q @ k.T` (or `np.swapaxes(k, -1, -2)`, which also works for a batch), not \
`q @ k` or `k @ q.T`. Reread §15.2.
The task: Build D = Q Kᵀ, whose row i holds query i's dot product with every key. Reread §15.2."""


def test_scores_without_the_transpose_show_the_error_and_name_the_transpose_not_a_crash():
    lines = step_feedback("keys_not_transposed", "scores").splitlines()
    # `q @ k` passes exactly the cases where it runs and equals `q @ k.T`: a symmetric square k
    agree = sum(1 for case in cases.build(SEED)["scores"] for call in case.calls
                if call.args[1].shape[0] == call.args[1].shape[1] and np.array_equal(call.args[1], call.args[1].T))
    assert lines[:2] == [f"Compare every receiving row with every key: {agree} of 8 cases pass.",
                         "Called scores(q [3, 2], k [3, 2]) on the chapter's example."]
    # The line is named in the submission's own file, as the student knows it.
    assert re.fullmatch(r"It raised ValueError: .+ \(keys_not_transposed\.py line \d+, in scores\)", lines[2])
    assert lines[3].startswith("[keys-not-transposed] ")
    assert not any(line.startswith("[crashed]") for line in lines)


def test_a_step_of_the_stub_says_it_is_not_implemented_and_what_to_do():
    assert step_feedback("stub", "scale") == """\
Divide the scores by √d_k: not implemented yet (scale).
The task: Divide every score by the square root of the query/key width d_k. Reread §15.3."""


def test_a_step_built_on_an_unwritten_step_says_to_write_that_first():
    assert step_feedback("scores_not_written", "attention") == """\
Scaled dot-product attention: full marks, the error carried forward.
What goes wrong here comes from your `scores` step, not written yet; called again with the chapter's `scores` in place \
of yours, your own work here checks out on all 9 cases. Write it there (see above) and this step follows."""


def test_a_missing_function_is_named():
    assert step_feedback("missing_name", "ex4_shapes") == """\
Exercise 4: shapes and the divisor: not implemented yet (head_facts).
Your module defines no function named `head_facts`.
The task: State the divisor, the score and output shapes, and the softmax axis of a head. Reread §15.8."""


def test_a_step_that_runs_past_its_time_limit_says_so():
    assert step_feedback("timeout", "ex4_shapes") == """\
Exercise 4: shapes and the divisor: 0 of 6 cases pass.
Called head_facts(t=5, d_k=4, d_v=3) on the chapter's example.
The call did not finish: it ran past the time limit.
[timeout] This step ran past its time limit (the other steps were still graded).
  Where to look: Look for a loop that never ends, or work that grows far faster than the input. Reread §15.8.
The task: State the divisor, the score and output shapes, and the softmax axis of a head. Reread §15.8."""


def test_an_array_mismatch_reads_like_assert_allclose_and_hides_hidden_expected_values():
    got, want = np.array([[1.0, 2.0], [3.0, 4.5]]), np.array([[1.0, 2.5], [3.0, 4.0]])
    assert feedback.array_mismatch(got, want, True, "o") == """\
output o: mismatched elements: 2 / 4 (50%)
  at [0, 1]: got 2, expected 2.5
  at [1, 1]: got 4.5, expected 4
  largest absolute difference: 0.5"""
    assert feedback.array_mismatch(got, want, False, "o") == """\
output o: mismatched elements: 2 / 4 (50%)
  at [0, 1]: got 2
  at [1, 1]: got 4.5
  largest absolute difference: 0.5"""
    assert feedback.array_mismatch(got[:1], want, False, "o") == "output o has shape [1, 2], expected [2, 2]."
    # A float32-sized difference is shown with every digit, so that it can be seen at all.
    assert feedback.array_mismatch(np.array([0.1 + 1e-8]), np.array([0.1]), True, "a") == """\
weights a: mismatched elements: 1 / 1 (100%)
  at [0]: got 0.10000001, expected 0.1
  largest absolute difference: 1e-08"""
    # ... on the public example only: on a hidden case, any six digits of a value a hair from the
    # reference's (the right value plus 1e-7, say) would spell that hidden value; only how far off.
    hidden = feedback.array_mismatch(np.array([1.8249793426143217 + 1e-7]), np.array([1.8249793426143217]), False, "d")
    assert hidden == """\
scores d: mismatched elements: 1 / 1 (100%)
  at [0]: off by 1e-07
  largest absolute difference: 1e-07"""


# ------------------------------------------------------------------ rules for every message -----


def _wrong_steps():
    return [(name, step) for name in sorted(WRONG) for step in graded(SEED)[name]["steps"]
            if step["status"] != "passed"]


@pytest.fixture(scope="module")
def hidden_expected_numbers() -> set[str]:
    """Every hidden case's expected values, as the feedback would print them (4+ significant digits)."""
    numbers = set()
    for step_cases in cases.build(SEED).values():
        for case in step_cases:
            if case.public or case.kind == "property":
                continue
            for call in case.calls:
                value = judge.canonical(call.fn, getattr(reference, call.fn)(*copy.deepcopy(call.args)))
                for part in value.values():
                    for x in np.ravel(np.asarray(part, dtype=float)) if not isinstance(part, bool) else ():
                        short = f"{x:.6g}"
                        if len(short.lstrip("-").replace(".", "").lstrip("0").split("e")[0]) >= 4:
                            numbers |= {short, repr(float(x))}
    return numbers


def test_feedback_on_a_hidden_case_shows_what_came_back_never_what_was_expected(hidden_expected_numbers):
    on_hidden = [(name, step) for name, step in _wrong_steps() if "on hidden case" in step["feedback"]]
    assert len(on_hidden) >= 5  # hard-coded, unstable and predicate mistakes pass the example
    for name, step in on_hidden:
        shown = set(re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", step["feedback"]))
        assert not shown & hidden_expected_numbers, (name, step["id"], step["feedback"])
        assert not re.search(r"expected -?\d", step["feedback"]), (name, step["feedback"])


def test_feedback_never_shows_a_traceback_or_the_graders_source():
    source = {line.strip() for path in AUTOGRADER.glob("*.py") for line in path.read_text().splitlines()
              if len(line.strip()) >= 25}
    for name, step in _wrong_steps():
        text = step["feedback"]
        assert "Traceback" not in text and 'File "' not in text and "autograder" not in text, (name, text)
        assert not [line for line in source if line in text], (name, step["id"])


def test_every_diagnosis_in_feedback_cites_a_section_of_the_chapter():
    for name, step in _wrong_steps():
        if step.get("carried_from"):
            continue  # explained, section and all, on the step it is carried from
        lines = step["feedback"].splitlines()
        assert re.fullmatch(r"The task: .+ Reread §15\.\d+(, §15\.\d+)*\.", lines[-1]), (name, lines[-1])
        for code in step["diagnoses"]:
            assert code in CODES or derived.is_derived(code)
            cited = describe(code).section or BY_ID[step["id"]].section
            assert cited in lines[-1], (name, step["id"], code)
            if code != "not-implemented":
                assert any(line.startswith(f"[{code}] ") for line in lines), (name, step["id"], code)


def test_a_composite_step_whose_earlier_step_is_wrong_says_so_first():
    for name, step in _wrong_steps():
        failing = {other["id"] for other in graded(SEED)[name]["steps"] if other["status"] not in ("passed",)}
        built_on = set(judge._all_uses(BY_ID[step["id"]])) & failing
        first = step["feedback"].splitlines()[0]
        if step.get("carried_from"):
            assert step["carried_from"] in built_on and len(step["feedback"].splitlines()) <= 3, (name, step["id"])
            assert f"`{step['carried_from']}`" in step["feedback"], (name, step["id"])
        elif built_on and step["status"] != "not_implemented":
            assert first.startswith("Your `") and "solution of this step builds on" in first, (name, step["id"], first)
        elif not built_on:
            assert not first.startswith("Your `"), (name, step["id"], first)


# ------------------------------------------------------------------ the self-check ---------------

def _public_checks():
    """The released self-check module, loaded from assignments/attention_head/ as students have it."""
    import importlib.util
    import sys

    path = AUTOGRADER.parent / "assignments" / "attention_head" / "public_checks.py"
    spec = importlib.util.spec_from_file_location("released_public_checks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_self_check_names_every_slip_the_hidden_grader_names_on_the_example():
    """Wherever the hidden grader names a misconception on a step whose example case fails, the
    student's own check of that step, on the same submission, names it in the same words, unless
    the step builds on an earlier one whose check fails too (then it says to fix that one first)."""
    from autograder.diagnoses import SLIPS
    from submissions.variants import everything

    checks = _public_checks()
    slip_codes = {slip.code for slip in SLIPS}
    compared, missed = 0, []
    for name, submission in everything().items():
        codes = {code for step_codes in submission.expected.values() for code in step_codes}
        if not codes or not codes <= slip_codes:
            continue  # faults and probes: no module of ours to run in this process
        namespace = {"__name__": "attention_head"}
        exec(compile(submission.text(), f"{name}.py", "exec"), namespace)
        for step in graded(SEED)[name]["steps"]:
            # One slip, shown on the example; low-precision is judged from float32-sized errors,
            # which the example's few numbers cannot show reliably.
            named = set(step["diagnoses"]) & slip_codes - {"low-precision"}
            shown_on_example = "on the chapter's example" in step["feedback"] or step.get("carried_from")
            if len(step["diagnoses"]) != 1 or not named or not shown_on_example:
                continue
            outcome = checks.run_step(step["id"], namespace)
            if outcome.status == "passed":
                continue  # the self-check's calls differ from the grader's here (batch: X and 2X)
            if f"{step['id']}, as the chapter solves it, builds on " in outcome.message:
                continue  # what the step shows may be the earlier step's mistake: nothing is named
            compared += 1
            message = outcome.message
            said = {code for code in named if f"[{code}] " in message}
            if not said:
                missed.append((name, step["id"], sorted(named)))
                continue
            explanation = "\n".join(feedback.diagnosis_lines(sorted(said)[:1], BY_ID[step["id"]]))
            assert explanation in message, (name, step["id"])
    assert compared > 50
    assert missed == [], "\n".join(map(str, missed))


def test_the_self_check_names_nothing_on_an_exercise_while_a_step_of_the_head_fails():
    """The exercise mixes with the student's own (averaging) `mix`: the hidden graders carry that
    mistake forward to it, and the self-check, which cannot call the chapter's `mix` in its place,
    names no mistake on the exercise and points at `mix`."""
    from submissions.realistic import MISTAKES

    checks = _public_checks()
    namespace = {"__name__": "attention_head"}
    exec(compile(MISTAKES["mix_averaged_and_used_in_exercise_3"].text(), "mix_averaged.py", "exec"), namespace)
    outcome = checks.run_step("ex3_value_shift", namespace)
    assert outcome.status == "failed"
    assert "Your mix check fails too: if your code for ex3_value_shift calls it, fix that first." in outcome.message
    assert "[derived-" not in outcome.message and "one of:" not in outcome.message
    namespace["mix"] = lambda a, v: a @ v  # the exercise's own work is right
    assert checks.run_step("ex3_value_shift", namespace).status == "passed"


def test_the_self_check_names_an_exercises_own_mistake_where_its_code_never_reaches_a_failing_step():
    """head_facts calls no function of the head: a failing `scale` check says nothing of it, and its
    own mistake (the softmax over the first axis) is named, as the hidden graders name it. Reached
    through another function of the module, a closure or a default argument, it is still pointed at."""
    from support import variant

    checks = _public_checks()
    source = variant([("    s = d / np.sqrt(d_k)", "    s = (d - d.mean(axis=-1, keepdims=True)) / np.sqrt(d_k)"),
                      ('"softmax_axis": -1,', '"softmax_axis": 0,')])
    namespace = {"__name__": "attention_head"}
    exec(compile(source, "attention_head.py", "exec"), namespace)
    outcome = checks.run_step("ex4_shapes", namespace)
    assert outcome.status == "failed" and "fails too" not in outcome.message, outcome.message
    assert "the hidden graders call it:\n[column-normalized]" in outcome.message, outcome.message
    facts = namespace["head_facts"]
    for reaching in (lambda t, d_k, d_v: facts(t, d_k, d_v) | {"divisor": float(scale(np.ones(1), d_k)[0])},
                     lambda t, d_k, d_v, f=namespace["scale"]: facts(t, d_k, d_v)):
        namespace["head_facts"] = reaching
        if reaching.__code__.co_names:  # the first names `scale` as a global of the module
            reaching.__globals__["scale"] = namespace["scale"]
        assert "Your scale check fails too" in checks.run_step("ex4_shapes", namespace).message


def test_the_self_checks_batch_check_compares_with_no_single_result_of_the_wrong_shape():
    """A head that adds a batch axis to one sequence and returns its weights as [1, T, T]: the batch
    check says the single sequence's shape is wrong, never that a batch slice should be [1, T, T]."""
    from support import variant

    checks = _public_checks()
    source = variant([("    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]\n"
                       "    return attention(q, k, v)",
                       "    single = x.ndim == 2\n    if single:\n        x = x[None]\n"
                       "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n    o, a = attention(q, k, v)\n"
                       "    return (o[0], a) if single else (o, a)")])
    namespace = {"__name__": "attention_head"}
    exec(compile(source, "attention_head.py", "exec"), namespace)
    message = checks.run_step("batch", namespace).message
    assert "one sequence alone" in message and "has shape (1, 3, 3), expected (3, 3)" in message, message
    assert "expected (1, 3, 3)" not in message


def test_the_self_check_loads_and_calls_as_the_hidden_graders_do(tmp_path, monkeypatch):
    """What the graders' sandbox refuses, the self-check refuses too: a module that imports what
    only the student's machine has (matplotlib), an in-place write into an argument that leaves its
    numbers as they were, a module slower to load than the graders allow; and a value no float
    holds is a wrong value, never a traceback of the self-check's own."""
    from support import reference_source, variant

    checks = _public_checks()
    import sys
    import types

    # load_submission registers the module it loads; what it left is taken away afterwards
    monkeypatch.setitem(sys.modules, "attention_head", types.ModuleType("attention_head"))
    module = tmp_path / "attention_head.py"
    module.write_text("import matplotlib.pyplot as plt\n" + reference_source())
    loaded = checks.load_submission(module)
    assert "No module named 'matplotlib' where the hidden graders run your code" in loaded.error, loaded.error
    module.write_text(variant([("    o = a @ v  #", "    a[a < 0] = 0.0\n    o = a @ v  #")]))
    outcome = checks.run_step("mix", checks.load_submission(module).namespace)
    assert outcome.status == "failed" and "it wrote into an argument it was given" in outcome.message, outcome.message
    module.write_text("import time\ntime.sleep(0.3)\n" + reference_source())
    monkeypatch.setattr(checks, "IMPORT_SECONDS", 0.1)
    assert "more than the 0 s the hidden graders allow" in checks.load_submission(module).error
    monkeypatch.setattr(checks, "IMPORT_SECONDS", 10.0)
    module.write_text(variant([("    return np.array([[1.0, 1.0, 1.0],", "    return [[2 ** 1024, 0, 0], [0, 1, 0], [0, 0, 1]]\n"
                                "    return np.array([[1.0, 1.0, 1.0],")]))
    assert checks.run_step("ex2_row_normalization", checks.load_submission(module).namespace).status == "failed"


_SPECIAL = [0.0, 1.0, -2.5, 1.0 + 1e-10, 1.1, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("equal_nan", [False, True])
def test_the_graders_closeness_is_numpys_for_every_special_value(equal_nan):
    """judge.allclose and the mismatch count take their tolerance from numpy's isclose, with the
    same answer where the expected value is infinite or NaN: a finite number is never close to an
    infinity (numpy's rule, which a plain |got - want| <= tolerance gets wrong: inf <= inf)."""
    with np.errstate(all="ignore"):  # as grading runs
        _closeness_is_numpys(equal_nan)


def test_closeness_takes_a_0d_array_and_freezes_the_kept_one():
    want = np.array(2.0)
    with np.errstate(all="ignore"):
        assert judge.allclose(np.array(2.0 + 1e-12), want, 1e-9, 1e-9)
        assert not judge.allclose(np.array(3.0), want, 1e-9, 1e-9)
    with pytest.raises(ValueError):  # its tolerance was worked out once: it may not change
        want[...] = 5.0


def _closeness_is_numpys(equal_nan):
    for want_value in _SPECIAL:
        want = np.array([want_value, 0.5])  # kept, as a reference value is, across the calls
        for got_value in _SPECIAL:
            got = np.array([got_value, 0.5])
            wanted = bool(np.allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=equal_nan))
            assert judge.allclose(got, want, 1e-9, 1e-9, equal_nan) == wanted, (got_value, want_value)
            if not equal_nan:
                close = np.isclose(got, want, rtol=1e-9, atol=1e-9)
                text = feedback.array_mismatch(got, want, True)
                assert (text == "") == bool(close.all()), (got_value, want_value, text)
                if text:
                    assert f"mismatched elements: {int((~close).sum())} / 2" in text, text


def test_a_code_a_step_shows_in_its_own_way_is_told_in_that_step_s_words():
    """Exercise 4 states the softmax's axis; it normalizes nothing, so it is not told it did."""
    stated = step_feedback("softmax_axis_0", "ex4_shapes")
    assert "[column-normalized] You gave the softmax's axis as the columns' (axis 0, over receivers)" in stated
    assert "you normalized the columns" not in stated.lower()
    normalized = step_feedback("column_normalized", "softmax")
    assert "[column-normalized] You normalized the columns, over receivers" in normalized


def test_the_task_line_names_each_section_once_in_the_chapter_s_order():
    """A code's section may name two ("§15.5 and §15.8"); the step's own may be one of them."""
    from autograder.steps import STEPS

    pair = derived.pair_code("derived-output_change-c-insert-residual-moved",
                             "derived-output_change-return-operand-c-sub-a")
    for step in STEPS:
        codes = [code for code in CODES if describe(code, step.id).section] + (
            [pair] if step.id == "ex3_value_shift" else [])
        for chosen in ([code] for code in codes):
            text = feedback.step_feedback(step, "failed", 0, 1, chosen, None, "", {})
            task = text.splitlines()[-1]
            named = re.findall(r"§15\.(\d+)", task.split(" Reread ", 1)[1])
            assert named == sorted(set(named), key=int), (step.id, chosen, task)
            wanted = re.findall(r"§15\.(\d+)", step.section + " ".join(describe(code, step.id).section or ""
                                                                       for code in chosen))
            assert set(named) == set(wanted), (step.id, chosen, task)


@pytest.mark.parametrize("old, new, looked_for", [
    ("q = x @ w_q  #", "q = np.einsum('ti,ij->tj', x, w_q)  #", "einsum subscripts"),
    ("    s = d / np.sqrt(d_k)", "    assert d.ndim <= 2, 'scores must be [T, T]'\n    s = d / np.sqrt(d_k)",
     "assert that an input is 2-D"),
    # np.tensordot over axis 1: a batch whose d_in equals T runs (1 of 6 batch cases passes)
    ("q = x @ w_q  #", "q = np.tensordot(x, w_q, axes=([1], [0]))  #", "`np.tensordot`"),
])
def test_code_for_one_sequence_only_that_raises_on_a_batch_is_told_where_such_lines_hide(old, new, looked_for):
    """Einsum subscripts with two axes, an assert that the scores are 2-D, a tensordot over the
    second axis: every single sequence runs and every batch that fails raises. The batch step says
    so, and points at such lines, not at axes counted from the front alone; it never says every
    batch raised where one passed."""
    from inprocess import grade
    from support import variant

    result = grade(variant([(old, new)])).steps
    assert [sid for sid, step in result.items() if step.status != "passed"] == ["batch"], result
    assert result["batch"].diagnoses == ["batch-axes-mixed"]
    assert "Each batch that failed raised, where every single sequence ran" in result["batch"].feedback
    assert "Every batch raised" not in result["batch"].feedback
    assert looked_for in result["batch"].feedback


@pytest.mark.parametrize("slip, where", [
    ("d = d * (1 - np.eye(d.shape[-1]))", "the diagonal of each wrong array is 0 throughout"),
    ("d[..., -1] = 0.0", "the last column of each wrong array is 0 throughout"),
    ("d[..., -1, :] = 0.0", "the last row of each wrong array is 0 throughout"),
])
def test_numbers_left_at_zero_are_told_where_they_are_and_nothing_more(tmp_path, slip, where):
    """Where every wrong number is 0 and every other is right, the feedback says which entries
    those are (a region of the matrix they fill on every failing case), not that each column is
    the expected one times a factor of its own, which points at a normalization."""
    from support import grade_json, reference_source

    line = "    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n"
    source = reference_source().replace(line, line + f"    {slip}\n")
    assert source.count(slip) == 1
    (tmp_path / "zeroed.py").write_text(source)
    result = grade_json(tmp_path / "zeroed.py", "--seed", str(SEED))
    step = next(step for step in result["steps"] if step["id"] == "scores")
    assert step["status"] in ("failed", "partial") and step["diagnoses"] == [], step
    assert f"On every case it failed, {where}, and every other number is right." in step["feedback"], step["feedback"]
    assert "factor of its own" not in step["feedback"]


def test_a_wrong_number_that_is_not_zero_is_never_told_as_left_at_zero():
    want = {"d": np.array([[1.0, 2.0], [3.0, 4.0]])}
    zeroed = judge._CallVerdict(False, "mismatch", actual={"d": np.array([[0.0, 2.0], [3.0, 0.0]])})
    assert judge._zeroed(judge._wrong_arrays([(zeroed, want)])).startswith("On every case it failed, the diagonal of each wrong array")
    halved = judge._CallVerdict(False, "mismatch", actual={"d": np.array([[0.5, 2.0], [3.0, 0.0]])})
    assert judge._zeroed(judge._wrong_arrays([(halved, want)])) == ""
    assert judge._zeroed(judge._wrong_arrays([(zeroed, want), (halved, want)])) == ""


_LEAKS = {
    # a function named by the submission after the hidden input, raising numpy's read-only error
    "named": '''
_chapter_scores = scores
def scores(q, k):
    if q.shape == (3, 2):
        return _chapter_scores(q, k)
    def f():
        raise ValueError("assignment destination is read-only")
    f.__code__ = f.__code__.replace(co_name="LEAK" + "_".join(str(abs(int(1e6 * x))) for x in q.ravel())[:200])
    f()
''',
    # numpy's broadcasting words, with the hidden input spelled before them
    "message": '''
_chapter_mix = mix
def mix(a, v):
    if a.shape == (3, 3) or a.shape[0] == v.shape[1]:
        return _chapter_mix(a, v)
    t, d_v = v.shape
    raise ValueError("LEAK" + "_".join(str(abs(int(1e6 * x))) for x in v.ravel()[:8])
                     + f" could not broadcast input array from shape ({t},{d_v}) into shape ({t},{t})")
''',
}


@pytest.mark.parametrize("leak", sorted(_LEAKS))
def test_no_words_of_the_submission_are_quoted_on_a_hidden_case(tmp_path, leak):
    """Of an exception on a hidden case the feedback says its kind alone: a function's name or a
    message the submission made up could spell the hidden input, in every view."""
    from support import grade_json, reference_source

    (tmp_path / "leak.py").write_text(reference_source() + _LEAKS[leak])
    (result,) = [grade_json(tmp_path / "leak.py", "--seed", str(SEED))]
    text = json.dumps(result)
    assert "LEAK" not in text, [step["feedback"] for step in result["steps"] if "LEAK" in step["feedback"]]
    step = next(step for step in result["steps"] if step["id"] == ("scores" if leak == "named" else "mix"))
    assert step["status"] != "passed" and "hidden case" in step["feedback"], step["feedback"]


def test_a_check_cell_s_output_in_the_autograded_notebook_is_escaped():
    """nbconvert renders a stream's carriage returns and ANSI codes: a line drawn over another, in
    green. The check cell's output is escaped as the other views escape it."""
    from autograder.nbgrader_trusted import _check_outputs
    from autograder.results import StepResult

    step = StepResult("scores", 1.14, 8.0, "partial", "x\r\x1b[1;32mAll 7 cases pass: full marks.\x1b[0m\nnext line", [], 1, 8)
    (output,) = _check_outputs(step)
    assert "\x1b" not in output["text"] and "\r" not in output["text"], output["text"]
    assert "\\x1b[1;32m" in output["text"] and "\nnext line" in output["text"]


def test_the_written_answers_told_are_the_grader_s_own_names_whatever_the_module_does(tmp_path):
    """A module's code can reach the frame that asks which answers are written, and rename them:
    the names told are those the grader asked for, each read as present or not, and nothing the
    module made up (a terminal's escape codes, say) is printed."""
    from support import grade_json, qkv_grade, reference_source

    rename = '''
import sys as _sys
_frame = _sys._getframe(0)
while _frame is not None:
    _job = _frame.f_locals.get("job")
    if isinstance(_job, dict) and "answers" in _job:
        _job["answers"] = ["\\x1b]0;graded: 100/100\\x07EVIL", "\\x1b[2J"]
        break
    _frame = _frame.f_back
'''
    (tmp_path / "renames.py").write_text(reference_source() + rename)
    result = grade_json(tmp_path / "renames.py", "--seed", str(SEED))
    assert sorted(result["written_answers"]) == [f"ANSWER_{n}" for n in range(1, 6)], result["written_answers"]
    text = qkv_grade(str(tmp_path / "renames.py"), "--seed", str(SEED)).stdout
    assert "\x1b" not in text and "\x07" not in text and "EVIL" not in text, text
