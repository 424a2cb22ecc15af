"""Advice that names what a student's code really did, where a generic line would mislead: an
import the graders' Python lacks, made inside a function (a student with scipy installed sees it
run), and a batch returned as one (o, a) pair per example. Real qkv-grade runs."""
from __future__ import annotations

import json
import re

import pytest

from support import qkv_grade, reference_source, require_sandbox

SEED = 3


def _steps(path) -> dict:
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    assert done.returncode == 0, done.stderr[-2000:]
    return {step["id"]: step for step in json.loads(done.stdout)["steps"]}


def _replaced(name: str, body: str) -> str:
    """The reference with the body of function `name` replaced (its def line kept)."""
    source = reference_source()
    start = source.index(f"def {name}(")
    body_at = source.index("\n", start) + 1
    following = re.search(r"^\S", source[body_at:], re.M)
    end = body_at + following.start() if following else len(source)
    return source[:body_at] + body + "\n\n" + source[end:]


def test_an_import_the_graders_lack_inside_a_function_is_told_as_such(tmp_path):
    require_sandbox()
    path = tmp_path / "scipy_inside.py"
    path.write_text(_replaced("softmax_rows", "    from scipy.special import softmax\n"
                                              "    return softmax(s, axis=-1)\n"))
    feedback = _steps(path)["softmax"]["feedback"]
    assert "No module named 'scipy'" in feedback
    assert "imports a module the graders' Python does not have" in feedback, feedback
    assert "Run the function on the chapter's example" not in feedback


def test_a_batch_returned_as_one_pair_per_example_is_told_to_stack_them(tmp_path):
    require_sandbox()
    path = tmp_path / "pairs.py"
    source = _replaced("self_attention_head",
                       "    if np.ndim(x) == 3:\n"
                       "        return [self_attention_head(example, w_q, w_k, w_v) for example in x]\n"
                       "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n"
                       "    return attention(q, k, v)\n")
    path.write_text(source)
    steps = _steps(path)
    assert steps["head"]["status"] == "passed"
    batch = steps["batch"]["feedback"]
    assert steps["batch"]["score"] == 0 and "wrong-type" in steps["batch"]["diagnoses"]
    assert "You returned one (o, a) pair per example of the batch, each of them right" in batch, batch
    # the same pairs, each wrong (weights doubled): no claim that they are right
    path.write_text(source.replace("for example in x]", "for example in 2 * x]"))
    batch = _steps(path)["batch"]["feedback"]
    assert "You returned one (o, a) pair per example of the batch: the step asks" in batch, batch


def test_exercise_1_returned_the_wrong_way_round_is_told_its_own_order(tmp_path):
    """zero_query_mixture returns (weights, output), the other way round from the head's (o, a):
    the advice for a swapped pair keeps each function's own order."""
    require_sandbox()
    path = tmp_path / "ex1_order.py"
    path.write_text(_replaced("zero_query_mixture",
                              "    t = k.shape[0]\n    weights = np.full(t, 1.0 / t)\n    return weights @ v, weights\n"))
    steps = _steps(path)
    feedback = steps["ex1_zero_query"]["feedback"]
    assert "swapped-outputs" in steps["ex1_zero_query"]["diagnoses"], feedback
    assert "the weights first and then the output (`weights, output`)" in feedback, feedback
    assert "the output first" not in feedback


def test_a_parameter_the_graders_never_pass_is_told_with_its_default(tmp_path):
    """`def attention(q, k, v, d_k=Q.shape[-1])` with the example's Q: every hidden call uses 2.
    The step names the parameter; a correct `softmax_rows(s, axis=-1)` says nothing of its own."""
    require_sandbox()
    path = tmp_path / "default.py"
    source = reference_source()
    start = source.index("def attention(q, k, v):")
    body_at = source.index("\n", start) + 1
    following = re.search(r"^\S", source[body_at:], re.M)
    end = body_at + following.start()
    source = (source[:start] + "Q = np.zeros((3, 2))\n\n\ndef attention(q, k, v, d_k=Q.shape[-1]):\n"
              "    s = scale(scores(q, k), d_k)\n    a = softmax_rows(s)\n    return mix(a, v), a\n\n\n"
              + source[end:])
    source = source.replace("def softmax_rows(s):", "def softmax_rows(s, axis=-1):", 1)
    path.write_text(source)
    steps = _steps(path)
    assert steps["softmax"]["status"] == "passed"
    feedback = steps["attention"]["feedback"]
    assert steps["attention"]["status"] in ("partial", "failed"), feedback
    assert ("Your `attention` takes `d_k`, which the graders never pass (its arguments are q, k, v): every call "
            "uses its default, fixed when the `def` ran") in feedback, feedback
    assert "takes `axis`" not in json.dumps(steps)


def test_a_wrong_answer_beside_a_crash_is_shown_too(tmp_path):
    """A row loop raises on a batch of matrices and also lets a NaN through: the crash alone is
    named, so the call that returned the wrong answer is shown beside the one that raised."""
    require_sandbox()
    path = tmp_path / "row_loop.py"
    path.write_text(_replaced("is_attention_weights",
                              "    for row in a:\n"
                              "        if min(row) < 0 or abs(sum(row) - 1) > 1e-9:\n"
                              "            return False\n"
                              "    return True\n"))
    step = _steps(path)["ex2_row_normalization"]
    assert step["diagnoses"] == ["crashed"], step
    lines = step["feedback"].splitlines()
    returned = next(i for i, line in enumerate(lines) if line.startswith("Not every failing call raised; "))
    assert re.fullmatch(r"Not every failing call raised; one that returned: is_attention_weights\(a \[\d+, \d+\]\) "
                        r"on hidden case \d+\.", lines[returned]), lines[returned]
    assert lines[returned + 1].startswith("It returned True, but the matrix is not valid attention weights: "
                                          "it has an entry that is NaN"), lines[returned + 1]
    assert lines[returned - 1].startswith("It raised "), lines
    # a loop that checks the rank first only lets the NaN through: no crash, and no such line
    path.write_text(path.read_text().replace("    for row in a:\n", "    if np.ndim(a) != 2:\n"
                                             "        return False\n    for row in a:\n", 1))
    step = _steps(path)["ex2_row_normalization"]
    assert "crashed" not in step["diagnoses"] and "Not every failing call raised" not in step["feedback"], step


def test_the_value_rows_a_wrong_shift_reached_are_named(tmp_path):
    """A shift that reaches other rows than those listed, in no way a model reads `rows` (every
    listed row but the first; the listed rows and the one after the last): the rows its shift
    reached are solved for from the answer and named, where that is exact."""
    require_sandbox()
    path = tmp_path / "slice.py"
    source = reference_source()
    path.write_text(source.replace("v_new[list(rows)] += shift", "v_new[list(rows)[1:]] += shift"))
    feedback = _steps(path)["ex3_value_shift"]["feedback"]
    assert ("On the chapter's example, your output is exactly the one with the shift added to no value row, "
            "where the call asks for rows [0]") in feedback, feedback
    path.write_text(source.replace("moved = a[:, list(rows)].sum(axis=-1)",
                                   "moved = a[:, sorted(set(rows) | {max(rows) + 1} - {len(a)})].sum(axis=-1) "
                                   "if rows else a[:, []].sum(axis=-1)"))
    feedback = _steps(path)["ex3_value_shift"]["feedback"]
    assert re.search(r"your change is exactly the one that shifting value rows \[(\d+, )+\d+\] makes, "
                     r"where the call asks for rows \[(\d+, )*\d+\]", feedback), feedback


def test_the_listed_rows_read_as_a_span_are_named(tmp_path):
    """A slice from the lowest listed row to the highest (`v[min(rows):max(rows)]`, one row short,
    or with `+ 1`) is a way of reading `rows` the models know."""
    require_sandbox()
    path = tmp_path / "slice.py"
    source = reference_source()
    path.write_text(source.replace("v_new[list(rows)] += shift", "v_new[min(rows):max(rows)] += shift"))
    assert _steps(path)["ex3_value_shift"]["diagnoses"] == ["derived-shifted_output-rows-read-span_minmax"]
    path.write_text(source.replace("moved = a[:, list(rows)].sum(axis=-1)",
                                   "moved = a[:, min(rows):max(rows) + 1].sum(axis=-1)"))
    assert _steps(path)["ex3_value_shift"]["diagnoses"] == ["derived-output_change-rows-read-span_minmax_through"]


def test_a_batch_whose_examples_are_joined_not_stacked_is_told_so(tmp_path):
    require_sandbox()
    path = tmp_path / "joined.py"
    path.write_text(_replaced("self_attention_head",
                              "    if np.ndim(x) == 3:\n"
                              "        pairs = [self_attention_head(one, w_q, w_k, w_v) for one in x]\n"
                              "        return np.concatenate([o for o, _ in pairs]), np.concatenate([a for _, a in pairs])\n"
                              "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n"
                              "    return attention(q, k, v)\n"))
    batch = _steps(path)["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed"]
    assert "the examples were joined along the positions (`np.concatenate`, or a reshape to B·T rows)" in batch["feedback"]


@pytest.mark.parametrize("index, told", [
    ("x[b - 1]", "slot b holds example b - 1's, and slot 0 the last example's"),
    ("x[len(x) - 1 - b]", "they come in reverse order, the last example's in slot 0"),
])
def test_a_batch_whose_examples_land_in_the_wrong_slots_is_told_which_slot_holds_which(tmp_path, index, told):
    """Each example computed right and stored at another example's slot (a loop that reads `x[b - 1]`
    for slot b, or the batch reversed): the feedback says in what order they came, where the
    batches of three examples or more tell the orders apart, and never names a line."""
    require_sandbox()
    path = tmp_path / "slots.py"
    path.write_text(_replaced("self_attention_head",
                              "    if np.ndim(x) == 3:\n"
                              "        o = np.zeros(x.shape[:2] + (w_v.shape[1],))\n"
                              "        a = np.zeros(x.shape[:2] + (x.shape[1],))\n"
                              "        for b in range(len(x)):\n"
                              f"            o[b], a[b] = self_attention_head({index}, w_q, w_k, w_v)\n"
                              "        return o, a\n"
                              "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n"
                              "    return attention(q, k, v)\n"))
    batch = _steps(path)["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed"], batch
    assert "Your results hold each example's right numbers, but in the wrong slots of the batch: " + told \
        in batch["feedback"], batch["feedback"]


def test_a_transpose_written_as_torch_writes_it_is_told_from_its_own_message(tmp_path):
    """`k.transpose(-1, -2)` swaps two axes in torch; numpy reads it as a new order for every axis,
    which a matrix has and a batch does not ("axes don't match array"): the message says which line,
    and the advice says how numpy's transpose differs."""
    require_sandbox()
    path = tmp_path / "torchlike.py"
    path.write_text(reference_source().replace("k_t = np.swapaxes(k, -1, -2)", "k_t = k.transpose(-1, -2)"))
    steps = _steps(path)
    assert steps["scores"]["status"] == "passed" and steps["head"]["status"] == "passed", steps["scores"]
    batch = steps["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed"], batch
    assert "It raised ValueError: axes don't match array" in batch["feedback"], batch["feedback"]
    assert "numpy's `transpose` takes a new place for every axis" in batch["feedback"], batch["feedback"]


def test_a_factor_that_is_a_size_of_the_call_is_named_by_that_size(tmp_path):
    """The input scaled by √d_in before it is projected, as embeddings often are: every wrong array is
    the expected one times a factor that differs from case to case and is √d_in on each."""
    require_sandbox()
    path = tmp_path / "scaled.py"
    path.write_text(_replaced("project_qkv", "    x = x * np.sqrt(x.shape[-1])\n"
                                             "    return x @ w_q, x @ w_k, x @ w_v\n"))
    qkv = _steps(path)["qkv"]
    assert "each wrong array of yours is the expected one times √d_in of that call" in qkv["feedback"], qkv["feedback"]


@pytest.mark.parametrize("extra, told", [
    ("    return 0.9 * a + 0.1 / a.shape[-1]\n",
     "times the same factor (0.9) plus a constant: (1 - ε)·A + ε/n with ε = 0.1 and n the length of a row"),
    ("    keep = np.random.default_rng(0).random(a.shape) >= 0.2\n    return a * keep / 0.8\n",
     "some numbers of each wrong array are 0 where the expected ones are not, and every other number is the "
     "expected one times 1.25: as dropout with p = 0.2 leaves them"),
])
def test_weights_smoothed_or_dropped_out_are_told_by_how_they_relate_to_the_right_ones(tmp_path, extra, told):
    """Habits of training code no model of the chapter's computation holds: label smoothing blends
    each row with uniform weights, dropout zeroes some weights and scales the rest. What the numbers
    show is said, checked on every case that failed."""
    require_sandbox()
    path = tmp_path / "trained.py"
    source = reference_source()
    body = "    a = e / e.sum(axis=-1, keepdims=True)  # each row divided by its own total\n    return a\n"
    assert body in source
    path.write_text(source.replace(body, "    a = e / e.sum(axis=-1, keepdims=True)\n" + extra, 1))
    softmax = _steps(path)["softmax"]
    assert told in softmax["feedback"], softmax["feedback"]


def test_an_output_put_through_layer_norm_is_told_its_rows_were_standardized(tmp_path):
    """Layer norm with its epsilon after the mix: no model holds the epsilon, but every row of the
    output is the expected row shifted and rescaled to mean 0 and standard deviation 1."""
    require_sandbox()
    path = tmp_path / "normed.py"
    path.write_text(_replaced("mix", "    o = a @ v\n    mu, sd = o.mean(axis=-1, keepdims=True), o.std(axis=-1, keepdims=True)\n"
                                     "    return (o - mu) / (sd + 1e-5)\n"))
    mix = _steps(path)["mix"]
    assert "each row of a wrong array is the expected row shifted and rescaled, with mean 0 and standard deviation 1" \
        in mix["feedback"], mix["feedback"]


def test_pairs_stacked_into_one_array_are_told_as_pairs_per_example(tmp_path):
    """`np.stack` of the (o, a) pairs: it raises where o and a differ in shape, and returns one
    [B, 2, T, T] array where they do not; that array is told as one pair per example."""
    require_sandbox()
    path = tmp_path / "stacked_pairs.py"
    path.write_text(_replaced("self_attention_head",
                              "    if np.ndim(x) == 3:\n"
                              "        return np.stack([self_attention_head(one, w_q, w_k, w_v) for one in x])\n"
                              "    q, k, v = project_qkv(x, w_q, w_k, w_v)\n"
                              "    return attention(q, k, v)\n"))
    # under seed 7 (and the tests' key) a hidden batch case has T == d_v, where the pairs stack
    done = qkv_grade(str(path), "--format", "json", "--seed", "7")
    assert done.returncode == 0, done.stderr[-2000:]
    batch = {step["id"]: step for step in json.loads(done.stdout)["steps"]}["batch"]
    assert "wrong-type" in batch["diagnoses"], batch
    assert "Where it returned, you returned one (o, a) pair per example of the batch, each of them right" \
        in batch["feedback"], batch["feedback"]


def test_an_output_made_in_another_array_s_shape_is_told_in_the_docstring_s_sizes(tmp_path):
    """Each example computed right, and written into an array made like the input: the batch's
    outputs are d_in wide where d_v is asked, or numpy refuses the write. That is told in the
    docstring's sizes, and not as a batch axis mixed up; in `mix`, an output made like the weights."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("self_attention_head", (
        "    if x.ndim == 3:\n"
        "        o, a = np.empty_like(x), np.empty(x.shape[:2] + (x.shape[1],))\n"
        "        for i in range(len(x)):\n"
        "            o[i], a[i] = self_attention_head(x[i], w_q, w_k, w_v)\n"
        "        return o, a\n"
        "    return attention(*project_qkv(x, w_q, w_k, w_v))")))
    batch = _steps(path)["batch"]
    assert "batch-axes-mixed" not in batch["diagnoses"] and batch["score"] < batch["max_score"], batch["feedback"]
    assert ("the last axis of your `o` has as many entries as d_in (the input's width), where it should have d_v "
            "(the value width)") in batch["feedback"], batch["feedback"]
    path.write_text(_replaced("mix", (
        "    o = np.zeros_like(a)\n"
        "    for i in range(a.shape[0]):\n"
        "        for j in range(a.shape[1]):\n"
        "            o[i] += a[i, j] * v[j]\n"
        "    return o")))
    mix = _steps(path)["mix"]
    assert "as many entries as T (the positions), where it should have d_v" in mix["feedback"], mix["feedback"]


def _batch_told(tmp_path, batch_lines: str, said: str) -> None:
    """A head whose batch branch is `batch_lines` gets batch-axes-mixed on the batch step, and `said`."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("self_attention_head", (
        "    if x.ndim == 3:\n" + batch_lines + "    return attention(*project_qkv(x, w_q, w_k, w_v))")))
    batch = _steps(path)["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed"], batch["feedback"]
    assert said in batch["feedback"], batch["feedback"]


def test_a_batch_whose_last_example_was_never_written_is_told_so(tmp_path):
    _batch_told(tmp_path, (
        "        o = np.empty(x.shape[:2] + (w_v.shape[-1],))\n"
        "        a = np.empty(x.shape[:2] + (x.shape[1],))\n"
        "        for i in range(len(x) - 1):\n"
        "            o[i], a[i] = self_attention_head(x[i], w_q, w_k, w_v)\n"
        "        return o, a\n"), "every example's right numbers but the last example's")


def test_a_parameter_left_none_for_the_body_to_fill_in_is_told(tmp_path):
    """`softmax_rows(s, temperature=None)`, whose body sets the temperature to √T when none is
    passed: the graders never pass one, so every call divides the scores by √T once more."""
    path = tmp_path / "attention_head.py"
    source = _replaced("softmax_rows", (
        "    if temperature is None:\n"
        "        temperature = np.sqrt(s.shape[-1])\n"
        "    z = s / temperature\n"
        "    e = np.exp(z - z.max(axis=-1, keepdims=True))\n"
        "    return e / e.sum(axis=-1, keepdims=True)"))
    path.write_text(source.replace("def softmax_rows(s):", "def softmax_rows(s, temperature=None):", 1))
    softmax = _steps(path)["softmax"]
    assert softmax["status"] in ("partial", "failed"), softmax["feedback"]
    assert ("Your `softmax_rows` takes `temperature`, which the graders never pass (its arguments are s): every "
            "call leaves it None, and runs with what your code puts in its place") in softmax["feedback"], \
        softmax["feedback"]


def test_a_batch_loop_that_keeps_its_last_example_alone_is_told_so(tmp_path):
    """The append outside the loop's body: only the last pass's results are stacked."""
    _batch_told(tmp_path, (
        "        outs, weights = [], []\n"
        "        for example in x:\n"
        "            o, a = self_attention_head(example, w_q, w_k, w_v)\n"
        "        outs.append(o)\n"
        "        weights.append(a)\n"
        "        return np.stack(outs), np.stack(weights)\n"), "Your results hold the last example of the batch alone, right")


def test_d_k_counted_from_the_front_is_named_on_the_batch(tmp_path):
    """`q.shape[1]` is d_k on one sequence and T on a batch: the line itself is named."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("attention", (
        "    a = softmax_rows(scale(scores(q, k), q.shape[1]))\n"
        "    return mix(a, v), a")))
    batch = _steps(path)["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed", "derived-self_attention_head-d_k-op-lastdim-to-dim1"], \
        batch["feedback"]
    assert "`d_k = q.shape[1]` in place of `d_k = q.shape[-1]`" in batch["feedback"], batch["feedback"]


def test_two_sizes_an_exception_sets_against_each_other_are_named(tmp_path):
    """A zero query built d_v wide: the example cannot show it (d_k = d_v = 2); the hidden cases
    raise, and numpy's message sets d_v against d_k, which the advice says in the docstring's words."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("zero_query_mixture", (
        "    q = np.zeros(v.shape[-1])\n"
        "    weights = softmax_rows((k @ q)[None, :] / np.sqrt(k.shape[-1]))[0]\n"
        "    return weights, weights @ v")))
    step = _steps(path)["ex1_zero_query"]
    assert "hard-coded" in step["diagnoses"], step["feedback"]
    said = re.search(r"There numpy's error sets a size of (\d+), the call's (\w+) \([^)]*\), against one of (\d+), "
                     r"its (\w+) \([^)]*\): some line takes the one for the other, which the chapter's example "
                     r"cannot show, where both are 2\.", step["feedback"])
    assert said and {said[2], said[4]} == {"d_k", "d_v"}, step["feedback"]
    shown = re.search(r"such as zero_query_mixture\(k \[(\d+), (\d+)\], v \[(\d+), (\d+)\]\)", step["feedback"])
    sizes = {"d_k": shown[2], "d_v": shown[4]}
    assert sizes[said[2]] == said[1] and sizes[said[4]] == said[3], step["feedback"]


def test_a_loop_s_maximum_started_from_zero_is_named_where_python_divides_by_zero(tmp_path):
    """A softmax in plain Python whose running maximum starts at 0: on a row far below zero every
    exponential underflows and the division by their total raises ZeroDivisionError, where numpy's
    gives NaN. That is a value, not a crash: the accumulator's start is named."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("softmax_rows", LOOP_SOFTMAX_FROM_ZERO))
    softmax = _steps(path)["softmax"]
    assert "derived-softmax_rows-m-insert-floor0" in softmax["diagnoses"], softmax["feedback"]
    assert "crashed" not in softmax["diagnoses"], softmax["feedback"]
    assert "as if the row maxima were accumulated from 0 rather than from the first term, as a loop does that " \
           "starts its running max at 0" in softmax["feedback"], softmax["feedback"]


def test_a_batch_of_one_returned_without_its_batch_axis_is_told_so(tmp_path):
    """A head that unwraps any result of one example: right on one sequence and on batches of two
    or more, but a batch of one ([1, T, d_in]) comes back as [T, d_v] and [T, T]. The hidden cases
    hold a batch of one, and the advice names the dropped axis, not examples joined."""
    path = tmp_path / "attention_head.py"
    source = reference_source()
    path.write_text(source + "\n\n_head = self_attention_head\n\n\ndef self_attention_head(x, w_q, w_k, w_v):\n"
                             "    o, a = _head(x, w_q, w_k, w_v)\n"
                             "    return (o[0], a[0]) if len(o) == 1 and np.ndim(x) == 3 else (o, a)\n")
    steps = _steps(path)
    batch = steps["batch"]
    assert batch["diagnoses"] == ["batch-axes-mixed"] and 0 < batch["score"] < batch["max_score"], batch["feedback"]
    assert "On a batch of one example you returned that example's right numbers without the batch axis" \
        in batch["feedback"] and "joined along the positions" not in batch["feedback"], batch["feedback"]
    assert all(step["status"] == "passed" for sid, step in steps.items() if sid != "batch")


def test_an_epsilon_in_place_of_the_shift_is_named_with_the_missing_shift(tmp_path):
    """A "careful" softmax that guards its total with 1e-9 instead of subtracting the row maximum:
    alone the epsilon is below any tolerance, but beside the unshifted exponentials it shows (a row
    far below zero gets weights of 0 where the plain unshifted softmax gives NaN, and a lone score's
    small total is divided by a total 1e-9 larger). Both are named, where either alone reproduces
    nothing."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("softmax_rows", "    e = np.exp(s)  # no shift: the epsilon keeps it safe\n"
                                              "    return e / (e.sum(axis=-1, keepdims=True) + 1e-9)"))
    steps = _steps(path)
    assert steps["softmax"]["diagnoses"] == ["unstable-softmax", "softmax-epsilon"], steps["softmax"]["feedback"]
    assert "Your result contains NaN" not in steps["softmax"]["feedback"]
    for step in steps.values():  # what fails downstream is carried from it
        assert set(step["diagnoses"]) <= {"unstable-softmax", "softmax-epsilon"}, step["feedback"]
        assert step["id"] == "softmax" or not step["diagnoses"] or step["carried_from"] == "softmax", step["feedback"]


LOOP_SOFTMAX_FROM_ZERO = """\
    import math
    rows = []
    for row in np.reshape(s, (-1, np.shape(s)[-1])):
        top = 0.0  # the running maximum, started at 0
        for value in row:
            top = value if value > top else top
        exps = [math.exp(value - top) for value in row]
        rows.append([e / sum(exps) for e in exps])
    return np.reshape(rows, np.shape(s))"""


def test_a_crash_only_where_t_is_1_is_told_so(tmp_path):
    """Exercise 1's weights made from a [1, T] score row and squeezed: at T = 1 the squeeze leaves
    a 0-d array, and `weights @ v` raises there alone. The hidden message stays hidden; the sizes
    that single out the failing call are told."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("zero_query_mixture",
                              "    q = np.zeros((1, k.shape[-1]))\n"
                              "    weights = softmax_rows(scale(scores(q, k), k.shape[-1])).squeeze()\n"
                              "    return weights, weights @ v\n"))
    feedback = _steps(path)["ex1_zero_query"]["feedback"]
    assert "It raised on every call where T (the positions) is 1, and ran wherever it is larger" in feedback, feedback
    assert "then call the function with T (the positions) equal to 1 and read the error" in feedback, feedback


def test_weights_stacked_into_one_array_are_told_from_the_message_not_as_a_crash_where_t_is_1(tmp_path):
    """The three weight matrices stacked into one array: numpy refuses wherever d_v is not d_k, at
    every T. What the hidden message says is told (a stack of arrays whose shapes differ), and
    nothing of T = 1."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("project_qkv", "    q, k, v = x @ np.stack([w_q, w_k, w_v])\n    return q, k, v\n"))
    qkv = _steps(path)["qkv"]
    assert "crashed" in qkv["diagnoses"], qkv["feedback"]
    assert "Some line stacks arrays (`np.stack`, `np.array([...])`) whose shapes differ on the calls that raised" \
        in qkv["feedback"], qkv["feedback"]
    assert "It raised on every call where" not in qkv["feedback"], qkv["feedback"]


def test_projections_written_with_np_inner_are_named_as_such(tmp_path):
    """`np.inner(x, w)` contracts the last axis of both arrays, as `x @ w.T` does: on the example's
    square weights it gives other numbers, and wherever d_in is not d_k it raises. Every one of the
    three lines is written so, and the edit of all three at once is what reproduces both."""
    path = tmp_path / "attention_head.py"
    path.write_text(_replaced("project_qkv", "    return np.inner(x, w_q), np.inner(x, w_k), np.inner(x, w_v)\n"))
    qkv = _steps(path)["qkv"]
    assert qkv["diagnoses"] == ["derived-project_qkv-q-each-op-inner"], qkv["feedback"]
    assert "with `q = np.inner(x, w_q); k = np.inner(x, w_k); v = np.inner(x, w_v)` in place of " \
           "`q = x @ w_q; k = x @ w_k; v = x @ w_v`: as if each matrix product became `np.inner`" in qkv["feedback"]
