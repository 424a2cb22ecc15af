"""Test submissions: the reference with one misconception or fault each, and what the grader must say.

Every submission is made from `solutions/attention_head.py` by exact textual replacements, so the
set stays in step with the reference: a replacement whose target is gone fails loudly. Each wrong
submission lists the diagnosis codes every affected step must carry; every other step must pass
with no code. Each correct submission must get full marks and no code.

Write them all to a folder to read or grade by hand:

    python tests/submissions/variants.py OUT && qkv-grade OUT --seed 7
"""
from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import REPO, qkv_grade, reference_source  # noqa: E402

from autograder.steps import STEP_IDS  # noqa: E402

EXAMPLE = json.loads((REPO / "data" / "part-iv" / "attention.json").read_text())

# Steps a misconception in one function reaches through the reference's own calls.
ATTENTION_ON = ("attention", "head", "batch", "ex5_intervention")
SCORES_ON = ("scores",) + ATTENTION_ON
SCALE_ON = ("scale",) + ATTENTION_ON
SOFTMAX_ON = ("softmax",) + ATTENTION_ON
MIX_ON = ("mix",) + ATTENTION_ON
QKV_ON = ("qkv", "head", "batch", "ex5_intervention")


@dataclass(frozen=True)
class Submission:
    replacements: tuple[tuple[str, str], ...]
    """(old, new) pairs; each old text must occur exactly once in the reference."""
    expected: dict[str, list[str]] = field(default_factory=dict)
    """Step id -> the exact diagnosis codes it must carry; unlisted steps must pass cleanly."""
    source: str | None = None
    """A whole module instead of replacements (the stub)."""
    status: dict[str, str] = field(default_factory=dict)
    """Step id -> a status other than failed/partial that the step must have."""

    def text(self) -> str:
        if self.source is not None:
            return self.source
        text = reference_source()
        for old, new in self.replacements:
            count = text.count(old)
            assert count == 1, f"{old!r} occurs {count} times in the reference, not once"
            text = text.replace(old, new)
        return text


def _on(steps: tuple[str, ...], code: str) -> dict[str, list[str]]:
    return {step: [code] for step in steps}


def _one(old: str, new: str, steps, code: str, **more) -> Submission:
    return Submission(((old, new),), _on(steps if isinstance(steps, tuple) else (steps,), code), **more)


def _literal(value) -> str:
    return repr(value)  # full float64 precision, as if pasted from attention.json


SOFTMAX_MAX = "shifted = s - s.max(axis=-1, keepdims=True)"
SOFTMAX_SUM = "a = e / e.sum(axis=-1, keepdims=True)"
ATTENTION_BODY = ("    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
                  "    o = mix(a, v)  # [T, d_v]\n")
HEAD_RETURN = "    return attention(q, k, v)\n"
FACTS_RETURN = "    return {\n        \"divisor\""


def _stub() -> str:
    from autograder.release import stub_module

    return stub_module((REPO / "solutions" / "attention_head.py").read_text())


WRONG: dict[str, Submission] = {
    # -- not written yet, and faults the runner sees -----------------------------------------
    "stub": Submission((), _on(STEP_IDS, "not-implemented"), source=_stub(),
                       status=dict.fromkeys(STEP_IDS, "not_implemented")),
    "missing_name": _one("def head_facts(t, d_k, d_v):", "def head_fact(t, d_k, d_v):", "ex4_shapes",
                         "not-implemented", status={"ex4_shapes": "not_implemented"}),
    "scores_not_written": _one("    k_t = np.swapaxes(k, -1, -2)  #", "    raise NotImplementedError()\n"
                               "    k_t = np.swapaxes(k, -1, -2)  #", SCORES_ON, "not-implemented",
                               status={step: "not_implemented" for step in SCORES_ON}),
    # what uses the None fails on it, and called again on the chapter's scale its own work checks
    # out: it carries the mistake, and names it
    "forgot_return": _one("    return s\n", "    s\n", ("scale",) + ATTENTION_ON + ("ex1_zero_query",), "wrong-type"),
    "timeout": _one(FACTS_RETURN, "    while True:\n        pass\n" + FACTS_RETURN, "ex4_shapes", "timeout",
                    status={"ex4_shapes": "timeout"}),
    "exit_called": _one("    if rows is None:\n        moved", "    import sys\n    sys.exit(1)\n"
                        "    if rows is None:\n        moved", "ex3_value_shift", "exit-called",
                        status={"ex3_value_shift": "error"}),
    "raises": _one("a = np.asarray(a, dtype=float)", "a = np.asarray(a, dtype=flaot)",
                   "ex2_row_normalization", "crashed"),
    "process_dies": _one("    # Receiver 1 takes", "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                         "    # Receiver 1 takes", "ex2_row_normalization", "crashed",
                         status={"ex2_row_normalization": "error"}),
    # An empty array whose other side is vast: numpy cannot rebuild it, so it travels as a bad value
    # for that call alone, and the calls after it are still run.
    "vast_empty_array": _one("    return np.array([[1.0, 1.0, 1.0],", "    return np.empty((0, 2**31))\n"
                             "    return np.array([[1.0, 1.0, 1.0],", "ex2_row_normalization", "wrong-type"),
    "memory_limit": _one("    output_before, weights_before", "    np.ones(2**40)\n    output_before, weights_before",
                         "ex5_intervention", "memory-limit", status={"ex5_intervention": "error"}),
    "mutates_softmax_input": _one(SOFTMAX_MAX, "s -= s.max(axis=-1, keepdims=True)\n    shifted = s",
                                  "softmax", "mutates-input"),
    "mutates_value_rows": _one("v_new = np.array(v, dtype=float)", "v_new = v", "ex3_value_shift",
                               "mutates-input"),
    "float32_mix": _one("o = a @ v  #", "o = (a.astype(np.float32) @ v.astype(np.float32)).astype(float)  #",
                        MIX_ON, "low-precision"),
    "float32_softmax": _one("e = np.exp(shifted)", "e = np.exp(shifted.astype(np.float32))",
                            SOFTMAX_ON + ("ex1_zero_query",), "low-precision"),
    "float32_projection": _one("q = x @ w_q  #", "q = (x.astype(np.float32) @ w_q.astype(np.float32)).astype(float)  #",
                               QKV_ON, "low-precision"),  # exact on the example's integers: not hard-coded
    "hard_coded_softmax": Submission((
        (SOFTMAX_MAX,
         f"if s.shape == (3, 3) and np.allclose(s, {_literal(EXAMPLE['values']['S'])}):\n"
         f"        return np.array({_literal(EXAMPLE['values']['A'])})\n"
         f"    return np.full(s.shape, 1.0 / s.shape[-1])\n    {SOFTMAX_MAX}"),),
        _on(SOFTMAX_ON, "hard-coded")),
    "hard_coded_zero_query": _one(
        "    q = np.zeros(k.shape[-1])  # [d_k]\n",
        f"    return np.array({_literal(EXAMPLE['exercises']['ex1_zero_query']['weights'])}), "
        f"np.array({_literal(EXAMPLE['exercises']['ex1_zero_query']['output'])})\n",
        "ex1_zero_query", "hard-coded"),
    # -- §15.1 -----------------------------------------------------------------------------
    "key_matrix_for_queries": _one("q = x @ w_q  #", "q = x @ w_k  #", QKV_ON, "swapped-roles"),
    "one_matrix_for_all": Submission((("k = x @ w_k  #", "k = x @ w_q  #"), ("v = x @ w_v  #", "v = x @ w_q  #")),
                                     _on(QKV_ON, "swapped-roles")),
    # -- §15.2 -----------------------------------------------------------------------------
    "keys_not_transposed": _one("k_t = np.swapaxes(k, -1, -2)", "k_t = k", SCORES_ON, "keys-not-transposed"),
    "receivers_and_keys_swapped": _one("d = q @ k_t", "d = k @ q.T", SCORES_ON,
                                       "keys-not-transposed"),
    # Queries compared with queries: no slip of the grammar, but an edit of the reference's
    # dataflow (the keys replaced by the queries), named where it was made and carried from there.
    "queries_compared_with_queries": Submission((("d = q @ k_t", "d = q @ np.swapaxes(q, -1, -2)"),),
                                                _on(SCORES_ON, "derived-scores-k_t-operand-k-to-q")),
    "scores_prescaled": _one("d = q @ k_t", "d = q @ k_t / np.sqrt(q.shape[-1])", SCORES_ON, "scores-prescaled"),
    # -- §15.3: the divisor ----------------------------------------------------------------
    "no_scaling": _one("s = d / np.sqrt(d_k)", "s = d", SCALE_ON, "no-scaling"),
    "scaled_by_d_k": _one("s = d / np.sqrt(d_k)", "s = d / d_k", SCALE_ON, "scaled-by-d_k"),
    "scaled_by_positions": _one("s = d / np.sqrt(d_k)", "s = d / d.shape[-1]", SCALE_ON, "scaled-by-positions"),
    "scaled_by_sqrt_positions": _one("s = d / np.sqrt(d_k)", "s = d / np.sqrt(d.shape[-1])", SCALE_ON,
                                     "scaled-by-positions"),
    "scaled_by_d_v": _one("d_k = q.shape[-1]", "d_k = v.shape[-1]", ATTENTION_ON, "scaled-by-d_v"),
    "scaled_by_d_in": _one(HEAD_RETURN, "    a = softmax_rows(scale(scores(q, k), x.shape[-1]))\n"
                                        "    return mix(a, v), a\n",
                           ("head", "batch", "ex5_intervention"), "scaled-by-d_in"),
    "scaled_weights": _one("a = softmax_rows(scale(scores(q, k), d_k))",
                           "a = softmax_rows(scores(q, k)) / np.sqrt(d_k)", ATTENTION_ON, "scaled-weights"),
    # -- §15.3: the softmax ----------------------------------------------------------------
    "column_normalized": Submission(((SOFTMAX_MAX, "shifted = s - s.max(axis=0, keepdims=True)"),
                                     (SOFTMAX_SUM, "a = e / e.sum(axis=0, keepdims=True)")),
                                    _on(SOFTMAX_ON, "column-normalized")),
    "column_sums_only": _one(SOFTMAX_SUM, "a = e / e.sum(axis=0, keepdims=True)", SOFTMAX_ON, "column-normalized"),
    "whole_matrix_normalized": Submission(((SOFTMAX_MAX, "shifted = s - s.max()"), (SOFTMAX_SUM, "a = e / e.sum()")),
                                          _on(SOFTMAX_ON, "whole-matrix-normalized")),
    "unstable_softmax": _one(SOFTMAX_MAX, "shifted = s", ("softmax", "attention", "head"), "unstable-softmax"),
    "not_exponentiated": _one(SOFTMAX_SUM, "a = s / s.sum(axis=-1, keepdims=True)",
                              SOFTMAX_ON + ("ex1_zero_query",), "not-exponentiated"),
    "not_normalized": _one(SOFTMAX_SUM, "a = e", SOFTMAX_ON + ("ex1_zero_query",), "not-normalized"),
    "column_max_subtracted": _one(SOFTMAX_MAX, "shifted = s - s.max(axis=0, keepdims=True)", SOFTMAX_ON,
                                  "column-max-subtracted"),
    # -- §15.4 -----------------------------------------------------------------------------
    "mixed_scores": _one(ATTENTION_BODY, "    s = scale(scores(q, k), d_k)\n    a = softmax_rows(s)\n"
                                         "    o = mix(s, v)\n", ATTENTION_ON, "mixed-scores"),
    "weights_transposed": _one("o = a @ v  #", "o = np.swapaxes(a, -1, -2) @ v  #", MIX_ON, "wrong-mix-order"),
    "weights_dot_T": _one("o = a @ v  #", "o = a.T @ v  #", MIX_ON, "wrong-mix-order"),
    "values_first": _one("o = a @ v  #", "o = v @ a  #", MIX_ON, "wrong-mix-order"),
    "output_divided_by_d_v": _one("o = a @ v  #", "o = a @ v / v.shape[-1]  #", MIX_ON, "output-divided-by-d_v"),
    # -- batches ---------------------------------------------------------------------------
    "batch_keys_dot_T": _one("k_t = np.swapaxes(k, -1, -2)", "k_t = k.T", "batch", "batch-axes-mixed"),
    "batch_softmax_axis_1": Submission(((SOFTMAX_MAX, "shifted = s - s.max(axis=1, keepdims=True)"),
                                        (SOFTMAX_SUM, "a = e / e.sum(axis=1, keepdims=True)")),
                                       {"softmax": ["derived-softmax_rows-all-axes--1-to-1"],
                                        # carried: the softmax's own mistake, named there, not the batch rule's
                                        "batch": ["derived-softmax_rows-all-axes--1-to-1"],
                                        "ex1_zero_query": ["derived-softmax_rows-all-axes--1-to-1"]}),
    "batch_flattened": _one("    q, k, v = project_qkv(x, w_q, w_k, w_v)",
                            "    q, k, v = project_qkv(x.reshape(-1, x.shape[-1]), w_q, w_k, w_v)\n"
                            "    o, a = attention(q, k, v)\n"
                            "    return o.reshape(x.shape[:-1] + (-1,)), a", "batch", "batch-axes-mixed"),
    # -- the exercises ---------------------------------------------------------------------
    # The weights kept as a [1, T] row: the derived edit that makes the very [1, d_v] output, and
    # beside it the output returned as a row, which gives the same numbers on every call: the
    # values cannot tell the two lines apart, so both are said, as one of two.
    "row_vector_output": Submission((("output = weights @ v", "output = weights[None, :] @ v"),),
                                    {"ex1_zero_query": ["derived-zero_query_mixture-o-operand-a-row",
                                                        "derived-zero_query_mixture-return-operand-o-row"]}),
    # The change flattened to one long vector: no model makes it, so its shape is what is said.
    "change_flattened": _one("    return np.outer(moved, shift)  #", "    return np.outer(moved, shift).ravel()  #",
                             "ex3_value_shift", "wrong-shape"),
    "zero_output": _one("output = weights @ v", "output = np.zeros(v.shape[-1])", "ex1_zero_query", "zero-output"),
    "zero_query_divides_by_zero": _one("weights = softmax_rows(scale(k @ q, k.shape[-1]))",
                                       "weights = (k @ q) / (k @ q).sum()", "ex1_zero_query",
                                       "not-exponentiated"),
    "accepts_column_stochastic": _one("a.sum(axis=1)", "a.sum(axis=0)", "ex2_row_normalization",
                                      "accepts-column-stochastic"),
    "predicate_exact_equality": _one("np.abs(a.sum(axis=1) - 1.0) <= 1e-9", "a.sum(axis=1) == 1.0",
                                     "ex2_row_normalization", "predicate-exact-equality"),
    "predicate_ignores_negatives": _one("bool(np.all(a >= 0) and rows_sum_to_one)", "bool(rows_sum_to_one)",
                                        "ex2_row_normalization", "predicate-ignores-negatives"),
    "full_shift_output": _one("v_new[list(rows)] += shift", "v_new += shift", "ex3_value_shift",
                              "full-shift-for-partial"),
    "full_shift_change": _one("moved = a[:, list(rows)].sum(axis=-1)", "moved = a.sum(axis=-1)",
                              "ex3_value_shift", "full-shift-for-partial"),
    "divisor_sqrt_positions": _one('"divisor": float(np.sqrt(d_k))', '"divisor": float(np.sqrt(t))',
                                   "ex4_shapes", "divisor-sqrt-positions"),
    "divisor_positions": _one('"divisor": float(np.sqrt(d_k))', '"divisor": float(t)', "ex4_shapes",
                              "scaled-by-positions"),
    "divisor_d_k": _one('"divisor": float(np.sqrt(d_k))', '"divisor": float(d_k)', "ex4_shapes", "scaled-by-d_k"),
    "divisor_d_v": _one('"divisor": float(np.sqrt(d_k))', '"divisor": float(np.sqrt(d_v))', "ex4_shapes",
                        "scaled-by-d_v"),
    "output_shape_d_k": _one('"output_shape": (t, d_v)', '"output_shape": (t, d_k)', "ex4_shapes",
                             "output-shape-d_k"),
    "softmax_axis_0": _one('"softmax_axis": -1', '"softmax_axis": 0', "ex4_shapes", "column-normalized"),
}

LOGSUMEXP = '''

def logsumexp(s):
    """log(sum(exp(s))) over the last axis, kept as a column."""
    m = s.max(axis=-1, keepdims=True)
    return m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
'''

CORRECT: dict[str, Submission] = {
    "reference": Submission(()),
    "einsum": Submission((
        ("q = x @ w_q  #", 'q = np.einsum("...ti,ik->...tk", x, w_q)  #'),
        ("d = q @ k_t  #", 'd = np.einsum("...ik,...jk->...ij", q, k)  #'),
        ("o = a @ v  #", 'o = np.einsum("...ij,...jd->...id", a, v)  #'))),
    "python_loops": Submission((
        ("    k_t = np.swapaxes(k, -1, -2)  #",
         "    if q.ndim > 2:\n        return np.stack([scores(qb, kb) for qb, kb in zip(q, k)])\n"
         "    d = np.zeros((len(q), len(k)))\n"
         "    for i in range(len(q)):\n        for j in range(len(k)):\n"
         "            d[i, j] = sum(q[i, c] * k[j, c] for c in range(q.shape[1]))\n"
         "    return d\n    k_t = np.swapaxes(k, -1, -2)  #"),
        ("    o = a @ v  #",
         "    if a.ndim > 2:\n        return np.stack([mix(ab, vb) for ab, vb in zip(a, v)])\n"
         "    o = np.zeros((a.shape[0], v.shape[1]))\n"
         "    for i in range(a.shape[0]):\n        for j in range(a.shape[1]):\n"
         "            o[i] += a[i, j] * v[j]\n    return o\n    o = a @ v  #"))),
    "logsumexp_softmax": Submission(((
        "    shifted = s - s.max(axis=-1, keepdims=True)",
        "    return np.exp(s - logsumexp(s))\n    shifted = s - s.max(axis=-1, keepdims=True)"),
        ("\ndef mix(a, v):", LOGSUMEXP.lstrip("\n") + "\n\ndef mix(a, v):"))),
    "exp_minus_logsumexp_inline": Submission(((
        "    e = np.exp(shifted)",
        "    return np.exp(shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)))\n    e = np.exp(shifted)"),)),
    "returns_lists": Submission((
        ("return a @ v_new  #", "return (a @ v_new).tolist()  #"),
        ("return np.outer(moved, shift)  #", "return np.outer(moved, shift).tolist()  #"),
        ("return weights, output", "return list(weights), output.tolist()"),
        ('"score_shape": (t, t)', '"score_shape": [t, t]'),
        ("    return np.array([[1.0, 1.0, 1.0],", "    return ([[1.0, 1.0, 1.0],"),
        ("                     [0.0, 0.0, 0.0]])", "            [0.0, 0.0, 0.0]])"),
        ("    return o\n", "    return o.tolist()\n"))),
    "np_matmul": Submission((
        ("d = q @ k_t  #", "d = np.matmul(q, k_t)  #"),
        ("o = a @ v  #", "o = np.matmul(a, v)  #"),
        ("v = x @ w_v  #", "v = np.matmul(x, w_v)  #"))),
    "transpose_with_axes": Submission((
        ("k_t = np.swapaxes(k, -1, -2)", "k_t = k.transpose(tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2))"),)),
    "tolerant_predicate": Submission((
        ("np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)", "np.isclose(a.sum(axis=1), 1.0, rtol=0, atol=1e-9).all()"),
        ('"softmax_axis": -1', '"softmax_axis": 1'))),
}


def everything() -> dict[str, Submission]:
    """Every submission here and in realistic.py, by name."""
    from submissions.realistic import MISTAKES, UNUSUAL

    found = {**WRONG, **CORRECT, **MISTAKES, **UNUSUAL}
    assert len(found) == len(WRONG) + len(CORRECT) + len(MISTAKES) + len(UNUSUAL), "a name is used twice"
    return found


def write_all(folder: Path) -> dict[str, Submission]:
    """Write every submission as `<name>.py` into `folder`; returns them by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, submission in everything().items():
        (folder / f"{name}.py").write_text(submission.text())
        written[f"{name}.py"] = submission
    return written


@lru_cache(maxsize=None)
def graded(seed: int) -> dict[str, dict]:
    """Grade every submission here in one real `qkv-grade FOLDER` run; results by submission name."""
    folder = Path(tempfile.mkdtemp(prefix="qkv-submissions-"))
    atexit.register(shutil.rmtree, folder, True)
    write_all(folder / "in")
    done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(seed), "--timeout", "1",
                     "--out", str(folder / "out"))
    assert done.returncode == 0, done.stderr
    return {result["submission"].removesuffix(".py"): result for result in json.loads(done.stdout)}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "qkv-test-submissions")
    print(f"{len(write_all(out))} submissions written to {out}/")
