"""One mistake costs once and is told once: the error carried forward, verified, never assumed.

A step whose own work is right keeps its points when its only wrong values are what the
reference gives with the earlier step's diagnosed mistake in place of that step. Each submission
here is the sample (a softmax normalized over columns) with, at most, one more change to
`attention`; all are graded in one real `qkv-grade FOLDER` run with and one without
--no-carry-forward. Then every single slip of the corpus (tests/submissions and the grammar in
autograder/slips.py) must cost points in one step only.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import jsonschema
import pytest

from autograder import carry, slips
from autograder.steps import BY_ID, STEP_IDS
from support import REPO, qkv_grade, reference_source, variant

# Under pytest-xdist, one worker runs the module: its submissions are graded once each way.
pytestmark = pytest.mark.xdist_group("carry-forward")

SEED = 7
SAMPLE = (REPO / "data" / "sample-submission" / "attention_head.py").read_text()
SCHEMA = jsonschema.Draft202012Validator(json.loads((REPO / "data" / "results.schema.json").read_text()))
ATTENTION_A = "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
ATTENTION_O = "    o = mix(a, v)  # [T, d_v]\n"
CHAPTER = json.loads((REPO / "data" / "part-iv" / "attention.json").read_text())["values"]
DOWNSTREAM = ("attention", "head", "batch", "ex1_zero_query", "ex5_intervention")


def _changed(old: str, new: str) -> str:
    assert SAMPLE.count(old) == 1
    return SAMPLE.replace(old, new)


_UNWRITTEN = """import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    {body}


def scores(q, k):
    {body}


def scale(d, d_k):
    {body}


def softmax_rows(s):
    {body}


def mix(a, v):
    {body}


def attention(q, k, v):
    a = softmax_rows(scale(scores(q, k), q.shape[-1]))
    return mix(a, v), a


def self_attention_head(x, w_q, w_k, w_v):
    return attention(*project_qkv(x, w_q, w_k, w_v))
"""


_LAYER_NORM = ("    o, a = attention(q, k, v)\n"
               "    o = (o - o.mean(axis=-1, keepdims=True)) / (o.std(axis=-1, keepdims=True) + 1e-5)  # as a block would\n"
               "    return o, a\n")

_SOFTMAX_ROWS = ("shifted = s - s.max(axis=-1, keepdims=True)", "a = e / e.sum(axis=-1, keepdims=True)")
_SOFTMAX_COLUMNS = ("shifted = s - s.max(axis=-2, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")

SUBMISSIONS = {
    "sample": SAMPLE,
    "correct": reference_source(),
    # A second, independent mistake: attention forgets the divisor √d_k.
    "unscaled_attention": _changed(ATTENTION_A, "    a = softmax_rows(scores(q, k))  # [T, T]\n"),
    # Attention wrong on its own, in a way no slip describes: a constant added to the output.
    "attention_off_by_a_constant": _changed(ATTENTION_O, "    o = mix(a, v) + 1e-3  # [T, d_v]\n"),
    # Attention copied from the chapter's example: right there, wrong everywhere else.
    "attention_hard_coded": _changed(
        ATTENTION_O + "    return o, a\n",
        f"    return np.array({CHAPTER['O']!r}), np.array({CHAPTER['A']!r})\n"),
    # Attention guessing uniform weights: what a column-normalized softmax never gives.
    "attention_guesses_uniform": _changed(
        ATTENTION_A, "    a = np.full((q.shape[-2], k.shape[-2]), 1.0 / k.shape[-2])  # [T, T]\n"),
}


# Mistakes no model reproduces, so the judge cannot compute what a step built on them should give:
# the steps built on them are called again with the chapter's computation in place of the wrong one.
REF_SCORES = "    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n"
# scores squashed into (-1, 1) by a tanh: a mistake no model of the grader's gives
SQUASHED = "    d = np.tanh(q @ k_t)  # squashed scores\n"
REF_ATTENTION_A = "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
SQUASHED_SCORES = variant([(REF_SCORES, SQUASHED)])
BUILT_ON_SCORES = ("attention", "head", "batch", "ex5_intervention")


# A head that projects, attends and returns zeros of the right shapes.
_ZERO_HEAD = ("\n\ndef self_attention_head(x, w_q, w_k, w_v):\n"
              "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n"
              "    o, a = attention(q, k, v)\n"
              "    return np.zeros_like(o), np.zeros_like(a)\n")


def _on_squashed(new_attention_a: str, append: str = "") -> str:
    """The squashed scores, with attention's line that computes the weights replaced."""
    return variant([(REF_SCORES, SQUASHED), (REF_ATTENTION_A, new_attention_a)], append)


SUBMISSIONS.update({
    "scores_squashed": SQUASHED_SCORES,
    # mix sorts each value column before mixing: a mistake no model of the grader's gives
    "mix_sorted_values": variant([(
        "    o = a @ v  # [T, T] @ [T, d_v] -> [T, d_v]: sums over contributing positions\n",
        "    o = a @ np.sort(v, axis=-2)  # [T, d_v]\n")]),
    # a second, independent mistake in attention: it forgets the divisor
    "scores_squashed_attention_unscaled": _on_squashed("    a = softmax_rows(scores(q, k))  # [T, T]\n"),
    # attention right, written in ways that call the scores more than once or keep them
    "scores_squashed_attention_calls_twice": _on_squashed(
        "    a = softmax_rows(scale((scores(q, k) + scores(q, k)) / 2, d_k))  # [T, T]\n"),
    "scores_squashed_attention_caches": _on_squashed(
        "    key = (q.tobytes(), k.tobytes(), q.shape, k.shape)\n"
        "    if key not in _SEEN:\n"
        "        _SEEN[key] = scores(q, k)\n"
        "    a = softmax_rows(scale(_SEEN[key], d_k))  # [T, T]\n",
        "\n_SEEN = {}\n"),
    "scores_squashed_attention_keeps_the_function": _on_squashed(
        "    a = softmax_rows(scale(_SCORES(q, k), d_k))  # [T, T]\n", "\n_SCORES = scores\n"),
    # attention that looks whether `scores` is still its own, and does the honest work only when
    # it is not: credited exactly as the honest one
    "scores_squashed_attention_detects": _on_squashed(
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
        "    if scores is _OWN['scores']:\n"
        "        a = np.zeros_like(a)  # its own run: wrong on purpose\n",
        "\n_OWN = {'scores': scores}\n"),
    # attention that keeps whatever stands in for its `scores`, and a `scores` that would use it
    "scores_squashed_attention_steals": _on_squashed(
        "    if scores is not _OWN['scores']:\n"
        "        _KEPT.append(scores)\n"
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "\n_KEPT = []\n_squashed = scores\n\n\n"
        "def scores(q, k):\n    return _KEPT[-1](q, k) if _KEPT else _squashed(q, k)\n\n\n"
        "_OWN = {'scores': scores}\n"),
    # attention that spoils the stand-in it is handed: nothing is verified
    "scores_squashed_attention_spoils": _on_squashed(
        "    if scores is not _OWN['scores']:\n"
        "        scores.__globals__['np'] = None\n"
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "\n_OWN = {'scores': scores}\n"),
    # attention and the head of their own return zeros; one pair of them also looks, through the
    # globals of what stands in for `scores` or `attention`, for the chapter's version of itself
    # scores written for 2-D keys only (right on its own cases, wrong on a batch), then the same with
    # a scale of its own making as well: what stands in for scale and attention in the second must
    # run this `scores`, so that the batch's mistake still costs the batch
    "scores_2d_only": variant([("k_t = np.swapaxes(k, -1, -2)", "k_t = k.T")]),
    "scores_2d_only_scale_wobbles": variant([("k_t = np.swapaxes(k, -1, -2)", "k_t = k.T"), (
        "s = d / np.sqrt(d_k)  # [T, T]", "s = d / np.sqrt(d_k) * (1 + 1e-3 * np.sin(d))  # [T, T]")]),
    # a softmax normalized over columns, which raises on exercise 1's one-dimensional scores: alone,
    # and with exercise 1's own mistake behind that call (the values summed, not averaged)
    "softmax_columns": variant([(_SOFTMAX_ROWS[0], _SOFTMAX_COLUMNS[0]), (_SOFTMAX_ROWS[1], _SOFTMAX_COLUMNS[1])]),
    "softmax_columns_zero_query_summed": variant([(_SOFTMAX_ROWS[0], _SOFTMAX_COLUMNS[0]),
                                                  (_SOFTMAX_ROWS[1], _SOFTMAX_COLUMNS[1]),
                                                  ("output = weights @ v", "output = v.sum(axis=0)")]),
    # exercise 1 never written past the softmax (it raises on its own, once the softmax is the
    # chapter's), behind the column softmax, which raises first on its 1-D input
    "softmax_columns_zero_query_unwritten": variant([(_SOFTMAX_ROWS[0], _SOFTMAX_COLUMNS[0]),
                                                     (_SOFTMAX_ROWS[1], _SOFTMAX_COLUMNS[1]),
                                                     ("    output = weights @ v", "    raise NotImplementedError\n"
                                                                                "    output = weights @ v")]),
    # a head that refuses every batch, and the chapter's example as well, raising the same error
    "head_refuses_batches_and_the_example": variant([("    return attention(q, k, v)\n",
        "    if np.ndim(x) != 2 or np.allclose(x, [[1, 0], [0, 1], [1, 1]]):\n"
        "        raise ValueError('one sequence only')\n    return attention(q, k, v)\n")]),
    # mix's arguments swapped inside attention: it raises wherever T is not d_v
    "attention_mix_swapped": variant([("    o = mix(a, v)  # [T, d_v]\n", "    o = mix(v, a)  # [T, d_v]\n")]),
    "scores_squashed_zero_steps": _on_squashed(
        "    return np.zeros_like(mix(softmax_rows(scale(scores(q, k), d_k)), v)), np.zeros((*q.shape[:-1], k.shape[-2]))\n",
        _ZERO_HEAD),
    "scores_squashed_zero_steps_borrow": _on_squashed(
        "    borrowed = getattr(scores, '__globals__', {}).get('attention')\n"
        "    if borrowed is not None and borrowed is not attention:\n"
        "        return borrowed(q, k, v)\n"
        "    return np.zeros_like(mix(softmax_rows(scale(scores(q, k), d_k)), v)), np.zeros((*q.shape[:-1], k.shape[-2]))\n",
        _ZERO_HEAD.replace("    q, k, v = ", "    borrowed = getattr(attention, '__globals__', {}).get('self_attention_head')\n"
                                             "    if borrowed is not None and borrowed is not self_attention_head:\n"
                                             "        return borrowed(x, w_q, w_k, w_v)\n    q, k, v = ")),
    # a head with a mistake of its own no model names (its output layer-normed), which a batch shows
    # example by example; then the same, normalized over the whole array, which mixes the examples;
    # then the first with a batch loop one example short
    "head_layer_normed": variant([("    return attention(q, k, v)\n", _LAYER_NORM)]),
    "head_normed_whole": variant([("    return attention(q, k, v)\n", _LAYER_NORM.replace(
        "o.mean(axis=-1, keepdims=True)", "o.mean()").replace("o.std(axis=-1, keepdims=True)", "o.std()"))]),
    "head_layer_normed_batch_short": variant([("    return attention(q, k, v)\n", _LAYER_NORM.replace(
        "    o, a = attention(q, k, v)\n",
        "    if x.ndim == 3:\n"
        "        pairs = [self_attention_head(x[b], w_q, w_k, w_v) for b in range(x.shape[0] - 1)]\n"
        "        return np.stack([o for o, _ in pairs]), np.stack([a for _, a in pairs])\n"
        "    o, a = attention(q, k, v)\n"))]),
    # a softmax shifted by each row's sum: NaN on scores in the thousands, as an unshifted one gives,
    # while attention's own cases tell the two apart (its first run names an edit of its own line)
    "softmax_shifted_by_row_sum": variant([("shifted = s - s.max(axis=-1, keepdims=True)",
                                            "shifted = s - s.sum(axis=-1, keepdims=True)")]),
    # a head that imports a module the graders lack: every call of the head and of the batch raises
    # there, which shows nothing of a batch axis
    "head_imports_scipy": variant([("    return attention(q, k, v)\n",
                                    "    from scipy.special import softmax  # noqa: F401\n    return attention(q, k, v)\n")]),
    # a head that returns zeros of the right shapes: each example alone gives what the batch gave
    # for it, yet nothing shows the batch axis carried through
    # the head mixes the example's own values, read from outside: it raises where T is not the
    # example's 3, on a batch and on each of its examples alike, and is wrong where it runs
    "head_mixes_the_example_s_values": variant([("    return attention(q, k, v)\n",
                                                 "    return attention(q, k, V_EXAMPLE)\n")],
                                               "\nV_EXAMPLE = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])\n"),
    # the projections joined and split in three equal parts (right only where d_k = d_v), and
    # exercise 5 multiplying the old output by the new W_V: its own mistake shows once called again
    "qkv_fused_ex5_output_times_new": variant([
        ("    q = x @ w_q", "    q, k, v = np.split(x @ np.concatenate([w_q, w_k, w_v], axis=-1), 3, axis=-1)\n    q = q"),
        ("    k = x @ w_k", "    k = k"), ("    v = x @ w_v", "    v = v"),
        ("    output_after, weights_after = self_attention_head(x, w_q, w_k, w_v_new)\n",
         "    output_after, weights_after = output_before @ w_v_new, weights_before\n")]),
    # a head that returns its output alone, not the pair: the wrong type, on a batch as on each of
    # its examples; and one that also drops the batch's last example
    "head_returns_output_only": variant([("    return attention(q, k, v)\n", "    return attention(q, k, v)[0]\n")]),
    "head_returns_output_only_batch_short": variant([
        ("    return attention(q, k, v)\n", "    o = attention(q, k, v)[0]\n    if o.ndim == 3:\n"
                                          "        o[-1] = 0.0\n    return o\n")]),
    # the pair and what a KV cache keeps, nested: (o, a, (q, k, v))
    "head_returns_its_cache_too": variant([("    return attention(q, k, v)\n",
                                            "    o, a = attention(q, k, v)\n    return o, a, (q, k, v)\n")]),
    "head_of_zeros": variant([("    return attention(q, k, v)\n",
                               "    o, a = attention(q, k, v)\n    return np.zeros_like(o), np.zeros_like(a)\n")]),
    # the five functions the others build on left unwritten, as `pass` or as the stub leaves them,
    # under the later steps written as the chapter composes them
    "unwritten_pass": _UNWRITTEN.format(body="pass"),
    "unwritten_stub": _UNWRITTEN.format(body="raise NotImplementedError()"),
})


def _grade(*extra: str) -> dict[str, dict]:
    folder = Path(tempfile.mkdtemp(prefix="qkv-carry-"))
    try:
        for name, source in SUBMISSIONS.items():
            (folder / "in").mkdir(exist_ok=True)
            (folder / "in" / f"{name}.py").write_text(source)
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(SEED), "--out", str(folder / "out"),
                         *extra, timeout=600)
        assert done.returncode == 0, done.stderr
        documents = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    SCHEMA.validate(documents)
    return {document["submission"].removesuffix(".py"): document for document in documents}


@pytest.fixture(scope="module")
def carried():
    return _grade()


@pytest.fixture(scope="module")
def on_its_own():
    return _grade("--no-carry-forward")


def _steps(result: dict) -> dict[str, dict]:
    return {step["id"]: step for step in result["steps"]}


def _lost(result: dict) -> dict[str, float]:
    return {step["id"]: round(step["max_score"] - step["score"], 2) for step in result["steps"]
            if step["score"] < step["max_score"]}


def test_the_sample_loses_points_only_in_softmax(carried):
    sample = carried["sample"]
    steps = _steps(sample)
    assert list(_lost(sample)) == ["softmax"]
    # softmax passes 1 case of 11: it keeps 0.91 of its 10 points, every other step all of its own
    assert steps["softmax"]["score"] == 0.91 and sample["score"] == 90.91
    for sid in DOWNSTREAM:
        assert steps[sid]["carried_from"] == "softmax", steps[sid]["feedback"]
        assert steps[sid]["diagnoses"] == ["column-normalized"]
    assert all(step["carried_from"] is None for sid, step in steps.items() if sid not in DOWNSTREAM)


def test_without_carry_forward_the_sample_scores_as_each_step_alone(on_its_own):
    sample = on_its_own["sample"]
    assert sample["score"] == 56.83
    assert set(_lost(sample)) == {"softmax"} | set(DOWNSTREAM)
    assert all(step["carried_from"] is None for step in sample["steps"])


def test_the_mistake_is_told_once_and_each_step_built_on_it_says_so_in_a_few_lines(carried):
    steps = _steps(carried["sample"])
    assert "mismatched elements" in steps["softmax"]["feedback"]
    assert "Where to look" in steps["softmax"]["feedback"]
    for sid in DOWNSTREAM:
        text = steps[sid]["feedback"]
        assert len(text.splitlines()) <= 3, text
        assert "`softmax`" in text and "column-normalized" in text and "checks out" in text
        assert "mismatched elements" not in text and "Where to look" not in text


def test_a_second_mistake_in_attention_still_costs_attention_its_points(carried):
    result = carried["unscaled_attention"]
    steps = _steps(result)
    assert set(_lost(result)) == {"softmax", "attention"}
    assert steps["attention"]["carried_from"] is None
    assert "no-scaling" in steps["attention"]["diagnoses"]
    assert "`softmax`" in steps["attention"]["feedback"]  # the earlier step is still named first
    # the head, the batch and exercise 5 are right on top of both mistakes
    for sid in ("head", "batch", "ex5_intervention"):
        assert steps[sid]["carried_from"] == "softmax", steps[sid]["feedback"]
    assert steps["ex1_zero_query"]["carried_from"] == "softmax"


@pytest.mark.parametrize("name", ["attention_off_by_a_constant", "attention_hard_coded", "attention_guesses_uniform"])
def test_a_step_wrong_in_a_way_the_earlier_mistake_does_not_explain_gets_no_carried_credit(carried, on_its_own, name):
    steps = _steps(carried[name])
    assert steps["attention"]["carried_from"] is None
    assert steps["attention"]["score"] == _steps(on_its_own[name])["attention"]["score"] < BY_ID["attention"].points
    # the steps built on it are right on top of it: called again with the chapter's `softmax_rows`
    # and `attention` in place of the student's, they pass, and the feedback names both mistakes;
    # `carried_from` is the one whose own code the step shows, else the first cause
    for sid in ("head", "batch", "ex5_intervention"):
        codes = set(steps[sid]["diagnoses"])
        source = next((used for used in ("softmax", "attention") if codes & set(steps_of(carried[name], used))), "softmax")
        assert steps[sid]["score"] == steps[sid]["max_score"] and steps[sid]["carried_from"] == source
        assert "`softmax`, `attention`" in steps[sid]["feedback"] and "`attention`" in steps[sid]["feedback"]
        assert _steps(on_its_own[name])[sid]["score"] < steps[sid]["max_score"]


def steps_of(result: dict, sid: str) -> list[str]:
    return _steps(result)[sid]["diagnoses"]


def test_carried_credit_never_raises_a_score_above_correct_code_or_its_own_grading(carried, on_its_own):
    assert carried["correct"]["score"] == on_its_own["correct"]["score"] == 100.0
    for name, result in carried.items():
        assert on_its_own[name]["score"] <= result["score"] <= carried["correct"]["score"]
        for step, alone in zip(result["steps"], on_its_own[name]["steps"]):
            assert step["score"] <= step["max_score"]
            assert step["score"] == (step["max_score"] if step["carried_from"] else alone["score"])


def test_the_text_view_and_gradescope_follow_the_carried_scores(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(SAMPLE)
    text = qkv_grade(str(path), "--seed", str(SEED)).stdout
    assert ": 90.91 / 100" in text and "carried from softmax" in text
    gradescope = json.loads(qkv_grade(str(path), "--seed", str(SEED), "--format", "gradescope").stdout)
    assert gradescope["score"] == 90.91
    tests = {test["name"].split(":")[0]: test for test in gradescope["tests"]}
    assert all(tests[sid]["status"] == "passed" and tests[sid]["score"] == tests[sid]["max_score"]
               for sid in DOWNSTREAM)
    assert tests["softmax"]["status"] == "failed"


# ------------------------------------------------------------------ called again ----------------

@pytest.mark.parametrize("name,home,built_on", [
    ("scores_squashed", "scores", BUILT_ON_SCORES),
    ("mix_sorted_values", "mix", BUILT_ON_SCORES),
    ("scores_squashed_attention_calls_twice", "scores", BUILT_ON_SCORES),
    ("scores_squashed_attention_caches", "scores", BUILT_ON_SCORES),
    ("scores_squashed_attention_keeps_the_function", "scores", BUILT_ON_SCORES),
])
def test_an_undiagnosed_earlier_mistake_costs_only_its_own_step(carried, on_its_own, name, home, built_on):
    """No model reproduces the mistake, so nothing names it; the steps built on it are called again
    with the chapter's computation in its place, pass, and keep their points."""
    result, alone = carried[name], on_its_own[name]
    steps = _steps(result)
    assert list(_lost(result)) == [home], {sid: steps[sid]["feedback"] for sid in _lost(result)}
    assert result["score"] == 100.0 - BY_ID[home].points + steps[home]["score"]
    for sid in built_on:
        assert steps[sid]["carried_from"] == home, steps[sid]["feedback"]
        text = steps[sid]["feedback"]
        assert len(text.splitlines()) <= 3 and f"`{home}`" in text and "checks out" in text, text
        assert "called again with the chapter's" in text
        assert _steps(alone)[sid]["score"] < steps[sid]["max_score"] and _steps(alone)[sid]["carried_from"] is None
    assert steps[home]["carried_from"] is None and "mismatched elements" in steps[home]["feedback"]


@pytest.mark.parametrize("name", ["head_layer_normed", "head_returns_output_only", "head_returns_its_cache_too"])
def test_a_head_mistake_no_model_names_costs_the_batch_nothing_when_each_example_alone_agrees(carried, on_its_own, name):
    """The head's own line is wrong, and no stand-in may replace the head in the batch step, which
    calls that very function: the batch is called again example by example, and since each example
    alone gives what the batch gave, the batch keeps its points, carried from the head. So too where
    the head returns a value of the wrong type (its output alone, or the pair and its cache), part by part."""
    result = carried[name]
    steps = _steps(result)
    assert list(_lost(result)) == ["head"], {sid: steps[sid]["feedback"] for sid in _lost(result)}
    assert steps["batch"]["carried_from"] == "head"
    text = steps["batch"]["feedback"]
    assert "called again on each example of the batch alone" in text and "`head`" in text and len(text.splitlines()) == 2
    assert _steps(on_its_own[name])["batch"]["score"] == 0.0


@pytest.mark.parametrize("name", ["head_normed_whole", "head_layer_normed_batch_short", "head_of_zeros",
                                  "head_returns_output_only_batch_short"])
def test_a_head_that_also_mixes_or_drops_the_examples_of_a_batch_still_costs_the_batch(carried, on_its_own, name):
    steps = _steps(carried[name])
    assert {"head", "batch"} <= set(_lost(carried[name])), _lost(carried[name])
    assert steps["batch"]["carried_from"] is None
    assert steps["batch"]["score"] == _steps(on_its_own[name])["batch"]["score"]


def test_credit_carried_on_an_exception_alone_is_taken_back_when_the_step_then_shows_its_own_mistake(carried, on_its_own):
    """Exercise 1 raises inside the column softmax, as that mistake does, before its own lines run.
    Its credit is carried until it is called again with the chapter's softmax: then a right exercise
    keeps it, and one that sums the values instead of averaging them is graded on its own cases."""
    right, summed = _steps(carried["softmax_columns"]), _steps(carried["softmax_columns_zero_query_summed"])
    assert right["ex1_zero_query"]["carried_from"] == "softmax" and right["ex1_zero_query"]["score"] == 6
    assert summed["ex1_zero_query"]["carried_from"] is None
    assert summed["ex1_zero_query"]["score"] == _steps(on_its_own["softmax_columns_zero_query_summed"])["ex1_zero_query"]["score"] < 6
    assert {sid: step["score"] for sid, step in summed.items() if sid != "ex1_zero_query"} == \
        {sid: step["score"] for sid, step in right.items() if sid != "ex1_zero_query"}


@pytest.mark.parametrize("name, sid", [("softmax_columns_zero_query_unwritten", "ex1_zero_query"),
                                       ("head_refuses_batches_and_the_example", "batch")])
def test_credit_carried_on_an_exception_alone_is_kept_only_where_calling_again_shows_the_work(
        carried, on_its_own, name, sid):
    """Raising where the earlier mistake raises buys no credit for work that was never written:
    exercise 1 that raises on its own once the chapter's softmax is in place, and a batch whose head
    refuses every batch (and the example, so that the head fails first), get their own grades."""
    steps = _steps(carried[name])
    assert steps[sid]["carried_from"] is None, steps[sid]["feedback"]
    assert steps[sid]["score"] == _steps(on_its_own[name])[sid]["score"] == 0


def test_a_step_carried_from_one_that_was_itself_carried_names_the_first_cause(carried):
    """The head, called again, is carried from attention; the batch was carried, on the first run,
    from the head's values: it names attention, through the head, never the head alone. And in
    every graded submission, nothing is carried from a step that is carried itself."""
    from autograder.results import StepResult

    def step(sid, carried_from=None, codes=("crashed",)):
        return StepResult(sid, 8.0, 8.0, "failed", "", list(codes), 0, 6, [False] * 6, carried_from=carried_from)

    steps = [step("attention", codes=("crashed", "wrong-mix-order")), step("head", "attention"),
             step("batch", "head", ("wrong-mix-order",))]
    by_id = {result.id: result for result in steps}
    carry._through_carried(by_id, steps)
    assert by_id["batch"].carried_from == "attention" and by_id["batch"].diagnoses == ["wrong-mix-order"]
    assert "your `attention` step, carried through your `head` step (wrong-mix-order)" in by_id["batch"].feedback
    assert by_id["head"] is steps[1] and by_id["attention"] is steps[0]
    # a code the first cause does not name (the step between named it on the first run alone) gives
    # way to the first cause's own
    steps[0] = by_id["attention"] = step("attention", codes=("crashed",))
    by_id["batch"] = steps[2] = step("batch", "head", ("wrong-mix-order",))
    carry._through_carried(by_id, steps)
    assert by_id["batch"].diagnoses == ["crashed"], by_id["batch"]
    for result in carried.values():
        graded = _steps(result)
        for one in graded.values():
            source = one["carried_from"]
            assert source is None or graded[source]["carried_from"] is None, (result["submission"], one)
            # and every code a carried step names is named by a failing step it builds on, not carried
            named = {code for other in graded.values() if other["status"] != "passed" and not other["carried_from"]
                     for code in other["diagnoses"]}
            assert source is None or set(one["diagnoses"]) <= named, (result["submission"], one)
    sums = _steps(carried["softmax_shifted_by_row_sum"])
    assert sums["head"]["carried_from"] == "softmax" and sums["head"]["diagnoses"] == sums["softmax"]["diagnoses"], sums


def test_a_later_step_with_a_mistake_of_its_own_still_loses_its_points(carried, on_its_own):
    result = carried["scores_squashed_attention_unscaled"]
    steps = _steps(result)
    assert set(_lost(result)) == {"scores", "attention"}
    assert steps["attention"]["carried_from"] is None
    assert steps["attention"]["score"] == _steps(on_its_own["scores_squashed_attention_unscaled"])["attention"]["score"]
    assert "`scores`" in steps["attention"]["feedback"]  # the earlier step is still named first
    for sid in ("head", "batch", "ex5_intervention"):  # right on top of both: both are named
        assert steps[sid]["carried_from"] == "scores" and "`scores`, `attention`" in steps[sid]["feedback"]


def test_a_step_that_looks_for_the_stand_in_gets_nothing_more_than_honest_work(carried):
    honest = carried["scores_squashed"]
    detects = carried["scores_squashed_attention_detects"]
    # right only when its earlier step is the chapter's: exactly what honest work on top of it earns
    assert detects["score"] == honest["score"] and list(_lost(detects)) == ["scores"]
    # keeping the stand-in reaches no other call: `scores` is still graded as the student wrote it
    steals = carried["scores_squashed_attention_steals"]
    assert steals["score"] == honest["score"] and _steps(steals)["scores"]["score"] == _steps(honest)["scores"]["score"]
    # spoiling it only spoils that call: not verified, graded on its own
    spoils = _steps(carried["scores_squashed_attention_spoils"])
    assert spoils["attention"]["carried_from"] is None and spoils["attention"]["score"] < 8.0
    assert spoils["head"]["carried_from"] == "scores"  # a fresh stand-in for every step called again


def test_a_step_called_again_cannot_reach_the_chapter_s_version_of_itself(carried):
    """What stands in for `scores` keeps only what it calls: `scores.__globals__` holds no
    `attention`, nor `attention.__globals__` a head, so a step that looks for one earns what the
    step without it earns. (The chapter's printed head can be had in other ways, as from the book:
    run in the first call, it is code like any the student writes, graded as such.)"""
    zero, borrow = carried["scores_squashed_zero_steps"], carried["scores_squashed_zero_steps_borrow"]
    assert borrow["score"] == zero["score"]
    for sid in ("attention", "head", "batch"):
        assert _steps(borrow)[sid]["score"] == _steps(zero)[sid]["score"] == 0.0, sid
        assert _steps(borrow)[sid]["carried_from"] is None, sid


def test_a_stand_in_calls_the_student_s_own_functions_where_their_steps_pass(carried):
    """A second mistake never earns points: the stand-ins for scale and attention run the student's
    `scores`, so its batch mistake still shows, and the batch keeps no credit it lost before."""
    alone, more = carried["scores_2d_only"], carried["scores_2d_only_scale_wobbles"]
    assert _steps(alone)["batch"]["score"] < BY_ID["batch"].points
    assert _steps(more)["batch"]["carried_from"] is None
    assert _steps(more)["batch"]["score"] == _steps(alone)["batch"]["score"]
    assert more["score"] < alone["score"]


def test_the_stand_in_is_the_reference_on_every_hidden_case():
    """What the sandbox puts in place of an earlier step is the chapter's computation, and gives
    the reference's very values on every case the grader calls it with."""
    import numpy as np

    from autograder import inside, judge, runner
    from inprocess import grader
    from solutions import attention_head as reference

    chapter = {"np": np}
    exec("".join(runner.chapter_functions().values()), chapter)
    g = grader(SEED)
    checked = 0
    for sid, cases in g.cases.items():
        for case in cases:
            for call in case.calls:
                if call.fn in inside.CHAPTER_NAMES:
                    got = judge.canonical(call.fn, chapter[call.fn](*call.args))
                    want = judge.canonical(call.fn, getattr(reference, call.fn)(*call.args))
                    assert all(np.array_equal(got[name], want[name]) for name in want), (sid, case.label)
                    checked += 1
    assert checked >= 50 and set(inside.CHAPTER_NAMES) == {fn for step in BY_ID.values() if any(
        step.id in other.uses for other in BY_ID.values()) for fn in step.functions}


STAND_IN_PROBE = """
import numpy as np

_SEEN = {}


def scores(q, k):
    return q @ k.T


def attention(q, k, v):
    namespace = globals()
    stand_in = namespace["scores"]
    seen = [stand_in is not _OWN["scores"],  # replaced while the step runs
            sorted(set(stand_in.__globals__) - {"np", "__builtins__"}) == ["scores"],  # itself: it calls no other
            stand_in is not _SEEN.get("last"),  # a fresh copy for every call
            stand_in.__globals__["np"] is np,  # whatever the call before did to its copy
            namespace["_ALIAS"] is stand_in]  # a name kept for the same function at import: replaced too
    _SEEN["last"] = stand_in
    stand_in.__globals__["np"] = None  # spoiled, for this call only
    namespace["scores"] = "rebound"  # put back after the call
    return np.array(seen, dtype=float), np.zeros((1, 1))


_OWN = {"scores": scores}
_ALIAS = scores
"""


def test_a_step_called_again_sees_a_fresh_stand_in_for_each_call_and_never_for_its_own_function(tmp_path):
    from autograder.runner import Worker
    from autograder.steps import STEP_IDS
    from autograder.submission import load
    from inprocess import grader

    path = tmp_path / "attention_head.py"
    path.write_text(STAND_IN_PROBE)
    g, number = grader(SEED), STEP_IDS.index("attention")
    with Worker(g.limits) as worker:
        run = worker.receive(worker.send(path.name, list(load(path).cells), g.plan,
                                         again=[(number, ["scores", "attention"])]))
    assert not run.lost and run.imported
    assert all(outcome is None for n, outcomes in enumerate(run.outcomes) if n != number for outcome in outcomes)
    outcomes = run.outcomes[number]
    assert len(outcomes) >= 2 and all(outcome is not None and outcome.raised is None for outcome in outcomes)
    for outcome in outcomes:  # the student's own attention ran every time, on a fresh stand-in
        assert outcome.value[0].tolist() == [1.0] * 5, outcome.value


# ------------------------------------------------------------------ the whole corpus ------------

def _home(lost: dict[str, float]) -> str:
    assert len(lost) == 1, lost
    (sid, points), = lost.items()
    assert points <= BY_ID[sid].points
    return sid


# Mistakes of the corpus that are not one slip in one place. Every other mistake costs points in
# its own step only: where no model reproduces it (float32 arithmetic, a hard-coded or missing
# value, NaN), the steps built on it are verified by calling them again on the chapter's computation.
NOT_A_SINGLE_VERIFIABLE_SLIP = {
    "stub": "nothing is written",
    "scale_d_k_and_columns": "two slips, in scale and softmax",
    "softmax_no_keepdims_mix_weights_transposed": "two slips, in softmax and mix",
    "softmax_unused_shift_raw_scores_normalized": "two slips, the second shows only on a batch",
    "batch_softmax_axis_1": "right on the softmax step's 2-D cases; wrong on a batch and on one query",
}


def test_every_single_slip_of_the_submissions_costs_points_in_one_step_only():
    from submissions.variants import everything, graded

    results = graded(SEED)
    checked = 0
    for name, submission in everything().items():
        if not submission.expected or name in NOT_A_SINGLE_VERIFIABLE_SLIP:
            continue
        home = _home(_lost(results[name]))
        assert home in submission.expected, (name, home)
        # the steps it reaches: those built on it, the chapter's way or (an exercise) a student's own
        assert all(home in BY_ID[sid].uses or home in _uses(sid) or home in carry._may_use(BY_ID[sid]) or sid == home
                   for sid in submission.expected), name
        checked += 1
    assert checked >= 80


def _uses(sid: str) -> set[str]:
    found = set()
    for used in BY_ID[sid].uses:
        found |= {used} | _uses(used)
    return found


def test_every_single_slip_of_the_grammar_costs_points_in_one_step_only():
    """The grammar writes a `result` slip into every function, which is a mistake in each: those
    are left out. Every other slip, in every way of writing it, lives in one step."""
    from submissions import grammar

    choices = [choice for choice in grammar.singles() if choice[0][0].knob != "result"]
    assert len(choices) >= 100 and {slip.knob for slip in slips.SLIPS} - {"result"} == \
        {choice[0][0].knob for choice in choices}
    folder = Path(tempfile.mkdtemp(prefix="qkv-carry-grammar-"))
    try:
        (folder / "in").mkdir()
        for choice in choices:
            (folder / "in" / f"{grammar.name(choice)}.py").write_text(grammar.source(choice))
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(SEED), "--out", str(folder / "out"),
                         timeout=3600)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert len(results) == len(choices)
    for result in results:
        home = _home(_lost(result))
        assert home in STEP_IDS, result["submission"]


def test_steps_built_on_unwritten_ones_are_graded_alike_whatever_the_placeholder(carried):
    """A later step's own work is credited on top of earlier steps not written yet, as on top of
    wrong ones: the same whether they were left as the stub's NotImplementedError or as `pass`, and
    however many of them there are (each is replaced, not only the first one to raise)."""
    stub, empty = carried["unwritten_stub"], carried["unwritten_pass"]
    assert stub["score"] == empty["score"] > 0
    for sid in ("attention", "head"):
        assert _steps(stub)[sid]["score"] == _steps(empty)[sid]["score"] == BY_ID[sid].points, sid
        assert _steps(stub)[sid]["carried_from"] == _steps(empty)[sid]["carried_from"], sid
    assert "not written yet" in _steps(stub)["attention"]["feedback"], _steps(stub)["attention"]["feedback"]
    for sid in ("qkv", "scores", "scale", "softmax", "mix"):
        assert _steps(stub)[sid]["score"] == _steps(empty)[sid]["score"] == 0.0, sid


def test_a_batch_that_raises_and_returns_as_the_head_does_on_each_example_alone_costs_nothing_more(carried):
    """The head mixes values read from outside: on a batch, and on each of its examples alone, it
    raises the very same exception from the same line, or returns the same numbers. One mistake,
    the head's: the batch keeps its points, carried from the head."""
    steps = _steps(carried["head_mixes_the_example_s_values"])
    assert "batch" not in _lost(carried["head_mixes_the_example_s_values"]), steps["batch"]["feedback"]
    assert steps["batch"]["carried_from"] == "head"


def test_a_step_called_again_tells_the_mistake_of_its_own_its_first_run_hid(carried, on_its_own):
    """Exercise 5 raised inside the fused projection on its first run. Called again with the
    chapter's projection and head in place, it still fails, now in its own line: that is told,
    and its grade is what it earns on its own cases."""
    steps = _steps(carried["qkv_fused_ex5_output_times_new"])
    text = steps["ex5_intervention"]["feedback"]
    assert ("Called again with the chapter's `project_qkv` and `self_attention_head` in place of yours, your "
            "`value_intervention` is still wrong on") in text, text
    assert "in `value_intervention`" in text.split("is still wrong on", 1)[1], text
    assert steps["ex5_intervention"]["carried_from"] is None
    assert steps["ex5_intervention"]["score"] == _steps(on_its_own["qkv_fused_ex5_output_times_new"])["ex5_intervention"]["score"]


def test_a_head_that_raises_on_every_call_shows_nothing_of_a_batch_axis(carried, on_its_own):
    """One import line the graders lack in the head: the batch calls the same function and raises
    what the head raises on every call, example by example too. Exceptions alike show nothing of a
    batch axis, so the batch keeps no credit: it is graded on its own cases, as without carrying."""
    steps = _steps(carried["head_imports_scipy"])
    assert _lost(carried["head_imports_scipy"]) == {"head": 8.0, "batch": 8.0}, _lost(carried["head_imports_scipy"])
    assert steps["batch"]["carried_from"] is None and steps["batch"]["status"] == "failed"
    assert "checks out" not in steps["batch"]["feedback"]
    assert _lost(on_its_own["head_imports_scipy"]) == {"head": 8.0, "batch": 8.0, "ex5_intervention": 8.0}


@pytest.mark.parametrize("body", ['    raise ValueError("todo")\n', "    from scipy.special import softmax  # noqa: F401\n",
                                  "    return undefined_name\n"])
def test_a_starter_whose_stubs_raise_another_exception_scores_nothing(tmp_path, body):
    """The starter module with every `raise NotImplementedError()` written otherwise (an exception of
    another type, an import the graders lack, a name never defined): nothing returns anywhere, so no
    step keeps credit carried on exceptions alone, the batch least of all."""
    starter = (REPO / "assignments" / "attention_head" / "attention_head.py").read_text()
    assert starter.count("    raise NotImplementedError()\n") >= 12
    path = tmp_path / "stubs.py"
    path.write_text(starter.replace("    raise NotImplementedError()\n", body))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["score"] == 0, {step["id"]: (step["score"], step["carried_from"]) for step in result["steps"]}
    assert all(step["carried_from"] is None for step in result["steps"])


@pytest.mark.parametrize("head", ["    o, a = attention(q, k, v)\n    return a, o\n", "    return attention(x, x, x)\n"])
def test_a_mistake_of_the_head_s_own_beside_an_earlier_one_costs_once_and_is_told_once(tmp_path, head):
    """Scores written `k @ q.T` (transposed, and raising on a batch, where `.T` reverses all three
    axes) and a head with a mistake of its own: the batch is the head on a batch, so with the chapter's
    scores in place, the head on each example alone gives what it gives within the batch, and the batch
    keeps its points; the head names the scores' mistake once, pointing back, and explains its own."""
    source = reference_source().replace("    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n",
                                        "    d = k @ q.T\n", 1)
    source = source.replace("    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]\n"
                            "    return attention(q, k, v)\n",
                            "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n" + head, 1)
    assert source.count("k @ q.T") == 1 and head in source
    path = tmp_path / "two_mistakes.py"
    path.write_text(source)
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    steps = _steps(result)
    assert set(_lost(result)) == {"scores", "head"}, _lost(result)
    assert steps["batch"]["carried_from"] in ("head", "scores"), steps["batch"]["feedback"]
    assert "on the whole batch and on each example alone" in steps["batch"]["feedback"], steps["batch"]["feedback"]
    told = steps["head"]["feedback"]
    if "keys-not-transposed" in steps["head"]["diagnoses"]:
        assert "[keys-not-transposed] Told above, at your `scores` step" in told, told
    assert "You compared without transposing the keys" not in told, told
    assert "Where to look" in told  # the head's own mistake is explained there


# `scores` wrong on a batch, and on one of its own hidden cases under seed 1 and the tests' key (queries [10, 6])
_BATCH_SCORES_WRONG = ("    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n",
                       "    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]\n"
                       "    if q.shape == (10, 6) or np.ndim(q) == 3:\n        d = d * 2.0\n")
_HEAD = ("    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]\n"
         "    return attention(q, k, v)\n")


def _batch_of(head: str, tmp_path) -> dict:
    source = reference_source().replace(*_BATCH_SCORES_WRONG, 1).replace(_HEAD, head, 1)
    assert head in source and "d * 2.0" in source
    path = tmp_path / "attention_head.py"
    path.write_text(source)
    done = qkv_grade(str(path), "--format", "json", "--seed", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    steps = _steps(json.loads(done.stdout))
    assert steps["scores"]["score"] < steps["scores"]["max_score"], steps["scores"]["feedback"]
    return steps


def test_a_head_that_refuses_a_batch_until_it_finds_itself_called_again_keeps_no_batch_credit(tmp_path):
    """A head with a mistake of its own (on T = 1), beside a `scores` wrong on a batch: the batch is
    called again with the chapter's `scores` in place. A head that refuses every batch unless it
    finds the stand-in there, and then loops over the examples, failed the batch on its own first
    run, inside its own code: what it does when called again takes nothing of that back."""
    steps = _batch_of("    if np.ndim(x) == 3:\n"
                      "        if scores.__globals__ is not globals():\n"
                      "            parts = [self_attention_head(e, w_q, w_k, w_v) for e in x]\n"
                      "            return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])\n"
                      "        raise ValueError('batches are not supported')\n"
                      "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n    o, a = attention(q, k, v)\n"
                      "    return (o + 1.0 if x.shape[0] == 1 else o), a\n", tmp_path)
    assert steps["head"]["score"] < steps["head"]["max_score"]
    assert steps["batch"]["score"] == 0.0 and steps["batch"]["carried_from"] is None, steps["batch"]["feedback"]


def test_a_head_written_for_batches_alone_keeps_the_credit_the_earlier_step_s_mistake_took(tmp_path):
    """A head that raises on one sequence (it unpacks B, T, d_in) and is right on every batch once the
    failing `scores` is replaced: its examples alone raise when called again, and the batch call's own
    result still shows the batch carried from `scores`."""
    steps = _batch_of("    B, T, d_in = x.shape\n" + _HEAD, tmp_path)
    assert steps["head"]["score"] < steps["head"]["max_score"]
    assert steps["batch"]["score"] == steps["batch"]["max_score"], steps["batch"]["feedback"]
    assert steps["batch"]["carried_from"] == "scores", steps["batch"]["feedback"]


def test_a_step_that_keeps_its_own_way_to_a_replaced_function_keeps_no_credit_it_raised_there(tmp_path):
    """A head that computes nothing of attention, holding the student's `scores` in a default
    argument, where `scores` raises everywhere (an import the graders lack): its first run raised
    inside `scores` only, and called again with the chapter's `scores` in the module, it raises
    there again, from the student's own function. That shows nothing of its own work: neither the
    head nor the batch keeps credit carried on those exceptions, as a head left unwritten keeps none."""
    broken = reference_source().replace("    k_t = np.swapaxes(k, -1, -2)",
                                        "    import scipy.linalg  # not in the graders' Python\n"
                                        "    k_t = np.swapaxes(k, -1, -2)", 1)
    junk = broken.replace("def self_attention_head(x, w_q, w_k, w_v):",
                          "def self_attention_head(x, w_q, w_k, w_v, _s=scores):\n    return _s(x, x), None\n\n\n"
                          "def _unused(x, w_q, w_k, w_v):", 1)
    unwritten = broken.replace(_HEAD, "    raise NotImplementedError()\n", 1)
    assert junk != broken and unwritten != broken
    scores = {}
    for name, source in (("junk", junk), ("unwritten", unwritten)):
        path = tmp_path / name / "attention_head.py"
        path.parent.mkdir()
        path.write_text(source)
        done = qkv_grade(str(path), "--format", "json", "--seed", "1")
        assert done.returncode == 0, done.stderr[-2000:]
        scores[name] = _steps(json.loads(done.stdout))
    for step_id in ("head", "batch"):
        assert scores["junk"][step_id]["score"] <= scores["unwritten"][step_id]["score"], \
            (step_id, scores["junk"][step_id]["feedback"])
