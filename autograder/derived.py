"""Error models derived from the reference: general edits of its dataflow, each with its own words.

The hand-written grammar (slips.py) names the mistakes the chapter warns about. Students make many
more, most of them one ordinary edit of one line: an operand replaced by another array in scope,
an operation inverted or swapped, a stage skipped, done twice or followed by an extra one, a
condition of a predicate dropped, added or loosened. Here each contract function is written once
as a short program of stages (`PROGRAMS`), the reference's own dataflow line by line, and the
edit operators (`_edits`) are applied to every stage. Each edit is a model with a stable code,
`derived-<function>-<stage>-<edit>`, and words written from the edit itself: the line as the
student's numbers say it was computed, beside the reference's line.

The judge tries these only after the grammar's single slips and pairs have failed, and pairs of
these (`PAIR`: two edits on two different stages) only after every single edit has failed; a
derived model, like any other, is named only when it reproduces every failing call. Its values on a
case are computed once for the whole class (the judge's per-call cache), so the memory they take
grows with the cases and the edits, never with the class.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from .slips import Inapplicable
from .steps import STEPS


class _Stop(Exception):
    """A predicate's early `return False`."""


def _swap(x):
    return np.swapaxes(x, -1, -2)


def _causal(a, fill):
    """`a` with every entry above the diagonal (a later position's key) replaced by `fill`."""
    return np.where(np.tril(np.ones(np.shape(a)[-2:], dtype=bool)), a, fill)


def _matrix(edit):
    """An edit of a matrix's layout (its diagonal, a triangle, its transpose, running down its rows),
    which cannot show on a value of fewer than two axes: numpy would spread a vector into a matrix
    (`np.tril` of a vector is square) and so make a shape no student's slip of that kind makes."""
    def edited(a, p):
        if np.ndim(a[0]) < 2:
            raise Inapplicable("a vector has no rows and columns")
        return edit(a, p)
    return edited


def _rows(rows):
    if isinstance(rows, np.ndarray) and rows.dtype == bool:
        return rows  # a boolean mask, as `np.array(rows, dtype=bool)` makes it
    return None if rows is None else list(rows)


def _selsum(a, rows, axis=-1, reduce=np.sum, receivers=False):
    picked = a if rows is None else a[_rows(rows)] if receivers else a[:, _rows(rows)]
    if reduce in (np.mean, np.median) and picked.size == 0:
        return np.full(np.sum(picked, axis=axis).shape, np.nan)  # numpy's NaN, without its warning
    return reduce(picked, axis=axis)


def _mulrows(v, shift, rows):
    out = np.array(v, dtype=float)
    if rows is None:
        out *= shift
    else:
        out[_rows(rows)] *= shift
    return out


def _setrows(v, shift, rows):
    out = np.array(v, dtype=float)
    if rows is None:
        out[...] = shift
    else:
        out[_rows(rows)] = shift
    return out


def _read_rows(rows, how, length):
    """`rows` as a slip reads it: the ways a list of row indices, or None for every row, goes wrong."""
    if how == "falsy":  # `if not rows:` takes an empty list for None
        return None if not rows else rows
    if how == "first":  # rows[0] only (an empty list has none)
        return rows if rows is None else [rows[0]]
    if how == "mask":  # the indices read as a boolean mask
        return rows if rows is None else np.array(rows, dtype=bool)
    if how == "span":  # `rows[0]:rows[-1]`: from the first listed row up to the last, which is left out
        return rows if rows is None else list(range(rows[0], rows[-1]))
    if how == "span_through":  # `rows[0]:rows[-1] + 1`: every row from the first listed to the last
        return rows if rows is None else list(range(rows[0], rows[-1] + 1))
    if how == "span_minmax":  # `min(rows):max(rows)`
        return rows if rows is None else list(range(min(rows), max(rows)))
    if how == "span_minmax_through":  # `min(rows):max(rows) + 1`
        return rows if rows is None else list(range(min(rows), max(rows) + 1))
    if how == "none_nothing":  # `rows or []`: None shifts no row
        return [] if rows is None else rows
    if how == "none_but_last":  # None expanded to range(T - 1)
        return list(range(length - 1)) if rows is None else rows
    if how == "none_but_first":  # None expanded to range(1, T)
        return list(range(1, length)) if rows is None else rows
    raise ValueError(how)


class _Reference(Exception):
    """An edit confined to one branch (`rows is None` or not), on a call of the other branch."""


def _every_row(text: str) -> str:
    """A line or phrase of an exercise 3 edit as it reads where rows is None, every row: `a[:, rows]`
    is `a`, and no row is "listed"."""
    return re.sub(r"\[(?::, )?rows(?:, :)?\]", "", text).replace("listed ", "")


def _branch(rows, when):
    if (rows is None) != (when == "none"):
        raise _Reference
    return True


def _addrows(v, shift, rows):
    out = np.array(v, dtype=float)
    if rows is None:
        out += shift
    else:
        out[_rows(rows)] += shift
    return out


def _close(sums, tol):
    return bool(np.all(np.abs(sums - 1.0) <= tol))


def _head(x, w_q, w_k, w_v):
    from solutions import attention_head as reference

    return reference.self_attention_head(x, w_q, w_k, w_v)


def _softmax_rows(a):
    from solutions import attention_head as reference

    return reference.softmax_rows(np.asarray(a, dtype=float))


def _guard(ok):
    if not ok:
        raise _Stop
    return True


# op -> (function of (args, params), how the line reads, kind of its value)
OPS: dict[str, tuple[Callable, str]] = {
    "matmul": (lambda a, p: a[0] @ a[1], "{0} @ {1}"),
    "mul": (lambda a, p: a[0] * a[1], "{0} * {1}"),
    "div": (lambda a, p: a[0] / a[1], "{0} / {1}"),
    "rdiv": (lambda a, p: a[1] / a[0], "{1} / {0}"),
    "sub": (lambda a, p: a[0] - a[1], "{0} - {1}"),
    "add": (lambda a, p: a[0] + a[1], "{0} + {1}"),
    "T": (lambda a, p: _swap(a[0]), "{0}ᵀ"),
    "sqrt": (lambda a, p: np.sqrt(a[0]), "√{0}"),
    "square": (lambda a, p: np.square(a[0]), "{0}²"),
    "same": (lambda a, p: a[0], "{0}"),
    "exp": (lambda a, p: np.exp(a[0]), "exp({0})"),
    "log": (lambda a, p: np.log(a[0]), "log({0})"),
    "expm1": (lambda a, p: np.expm1(a[0]), "np.expm1({0})"),
    "zero_power": (lambda a, p: np.power(a[0], 0.0), "{0} ** (1 // 2)"),
    "max": (lambda a, p: np.max(a[0], axis=_axis(a[0], p["axis"]), keepdims=True), "{0}.max(axis={axis}, keepdims=True)"),
    "min": (lambda a, p: np.min(a[0], axis=_axis(a[0], p["axis"]), keepdims=True), "{0}.min(axis={axis}, keepdims=True)"),
    "median_k": (lambda a, p: np.median(a[0], axis=_axis(a[0], p["axis"]), keepdims=True),
                 "np.median({0}, axis={axis}, keepdims=True)"),
    "sum": (lambda a, p: np.sum(a[0], axis=_axis(a[0], p["axis"]), keepdims=True), "{0}.sum(axis={axis}, keepdims=True)"),
    "mean": (lambda a, p: np.mean(a[0], axis=_axis(a[0], p["axis"]), keepdims=True), "{0}.mean(axis={axis}, keepdims=True)"),
    "lastdim": (lambda a, p: a[0].shape[-1], "{0}.shape[-1]"),
    "firstdim": (lambda a, p: a[0].shape[0], "{0}.shape[0]"),
    # the second axis's length, counted from the front: the last of a [T, d] array, T on a batch
    "dim1": (lambda a, p: a[0].shape[1], "{0}.shape[1]"),
    "size": (lambda a, p: a[0].size, "{0}.size"),
    "axes_count": (lambda a, p: np.ndim(a[0]), "{0}.ndim"),
    "dot": (lambda a, p: np.dot(a[0], a[1]), "np.dot({0}, {1})"),
    # the last axis of both contracted: `a @ bᵀ` for 2-D arrays, every example with every other on a batch
    "inner": (lambda a, p: np.inner(a[0], a[1]), "np.inner({0}, {1})"),
    "zeros": (lambda a, p: np.zeros(a[0]), "np.zeros({0})"),
    "ones": (lambda a, p: np.ones(a[0]), "np.ones({0})"),
    # a softmax of each number alone: exp(x - x) / exp(x - x), 1 wherever x is finite
    "per_entry": (lambda a, p: np.exp(a[0] - a[0]) / np.exp(a[0] - a[0]), "np.vectorize(softmax)({0})"),
    "outer": (lambda a, p: np.outer(a[0], a[1]), "np.outer({0}, {1})"),
    "addrows": (lambda a, p: _addrows(a[0], a[1], a[2]), "{0} with {1} added to {0}[{2}]"),
    "addall": (lambda a, p: np.asarray(a[0]) + a[1], "{0} with {1} added to every row"),
    "selsum": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1)), "{0}[:, {1}].sum(axis={axis})"),
    "rowselsum": (lambda a, p: np.sum(a[0][_rows(a[1])], axis=0) if a[1] is not None else a[0].sum(axis=0),
                  "{0}[{1}, :].sum(axis=0)"),
    "ndim2": (lambda a, p: np.asarray(a[0]).ndim == 2, "{0}.ndim == 2"),
    "ndim_at_least_2": (lambda a, p: np.asarray(a[0]).ndim >= 2, "{0}.ndim >= 2"),
    # the length (the first axis's) tested where the number of axes is meant
    "len2": (lambda a, p: len(a[0]) == 2 if np.ndim(a[0]) else False, "len({0}) == 2"),
    # a square test for the 2-D one: raises, as `a.shape[1]` does, on a 1-D array
    "square": (lambda a, p: np.asarray(a[0]).shape[0] == np.asarray(a[0]).shape[1], "{0}.shape[0] == {0}.shape[1]"),
    "guard": (lambda a, p: _guard(a[0]), "return False unless {0}"),
    "rowsum": (lambda a, p: np.asarray(a[0], dtype=float).sum(axis=p["axis"]), "{0}.sum(axis={axis})"),
    "close": (lambda a, p: _close(a[0], p["tol"]), "all(|{0} - 1| <= {tol})"),
    # the sums rounded (for display, say) and compared with 1 exactly
    "close_round": (lambda a, p: bool(np.all(np.round(a[0], p["n"]) == 1.0)), "all(np.round({0}, {n}) == 1)"),
    "nan_to_num": (lambda a, p: np.nan_to_num(np.asarray(a[0], dtype=float)), "np.nan_to_num({0})"),
    # (`rtol`: a bound relative to what the test compares with, as np.isclose's is)
    "close_first": (lambda a, p: _close(np.atleast_1d(a[0])[:1], p["tol"] + p.get("rtol", 0.0)),
                    "|{0}[0] - 1| <= {tol}"),
    "close_any": (lambda a, p: bool(np.any(np.abs(a[0] - 1.0) <= p["tol"] + p.get("rtol", 0.0))),
                  "any(|{0} - 1| <= {tol})"),
    "close_below": (lambda a, p: bool(np.all(a[0] - 1.0 <= p["tol"])), "all({0} - 1 <= {tol})"),
    "close_rel": (lambda a, p: bool(np.allclose(a[0], 1.0)), "np.allclose({0}, 1)"),
    "nonneg": (lambda a, p: bool(np.all(np.asarray(a[0]) >= 0)), "all({0} >= 0)"),
    "positive": (lambda a, p: bool(np.all(np.asarray(a[0]) > 0)), "all({0} > 0)"),
    "nonneg_any": (lambda a, p: bool(np.any(np.asarray(a[0]) >= 0)), "any({0} >= 0)"),
    "at_most_one": (lambda a, p: bool(np.all(np.asarray(a[0]) <= 1)), "all({0} <= 1)"),
    "square_matrix": (lambda a, p: a[0].shape[-1] == a[0].shape[-2], "{0} is square"),
    "and": (lambda a, p: bool(all(a)), " and ".join),
    "const": (lambda a, p: p["value"], "{value}"),
    "pair": (lambda a, p: (int(a[0]), int(a[1])), "({0}, {1})"),
    "float": (lambda a, p: float(a[0]), "float({0})"),
    "tuple": (lambda a, p: tuple(a), "({all})"),
    "one": (lambda a, p: a[0], "{0}"),
    "facts": (lambda a, p: dict(zip(("divisor", "score_shape", "output_shape", "softmax_axis"), a)), "{{…}}"),
    "exp2": (lambda a, p: np.exp2(a[0]), "2 ** {0}"),
    "exp10": (lambda a, p: np.power(10.0, a[0]), "10 ** {0}"),
    # a transpose written as a reshape: the same numbers, flowed into the transposed shape in order
    "reshape_t": (lambda a, p: np.reshape(a[0], np.shape(a[0])[:-2] + (np.shape(a[0])[-1], np.shape(a[0])[-2])),
                  "{0}.reshape(… {0}.shape[-1], {0}.shape[-2])"),
    # a result transposed on the way and put back with a reshape rather than a transpose
    "reflow": (lambda a, p: np.reshape(_swap(a[0]), np.shape(a[0])), "{0}ᵀ.reshape({0}.shape)"),
    # the columns normalized as well, after the line (each column divided by its total)
    "sumcols": (lambda a, p: a[0] / np.sum(a[0], axis=-2, keepdims=True), "{0} / {0}.sum(axis=-2, keepdims=True)"),
    # every axis of length one dropped: a [1, d] row becomes [d], a batch of one loses its batch axis
    "squeeze": (lambda a, p: np.squeeze(a[0]), "np.squeeze({0})"),
    "isqrt": (lambda a, p: np.floor(np.sqrt(a[0])), "floor(√{0})"),
    "subrows": (lambda a, p: _addrows(a[0], -np.asarray(a[1]), a[2]), "{0} with {1} subtracted from {0}[{2}]"),
    "selmean": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1), np.mean), "{0}[:, {1}].mean(axis={axis})"),
    "selmax": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1), np.max), "{0}[:, {1}].max(axis={axis})"),
    "pair_rev": (lambda a, p: (int(a[1]), int(a[0])), "({1}, {0})"),
    # a shape given for a batch of one: a leading axis of length 1
    "pair_batch": (lambda a, p: (1, int(a[0]), int(a[1])), "(1, {0}, {1})"),
    "head": (lambda a, p: _head(*a), "self_attention_head({0}, {1}, {2}, {3})"),
    "intervention": (lambda a, p: {"output_before": a[0][0], "weights_before": a[0][1],
                                   "output_after": a[1][0], "weights_after": a[1][1]}, "{{…}}"),
    # the exercises' own ops
    "selmin": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1), np.min), "{0}[:, {1}].min(axis={axis})"),
    "selmedian": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1), np.median),
                  "np.median({0}[:, {1}], axis={axis})"),
    "setrows": (lambda a, p: _setrows(a[0], a[1], a[2]), "{0} with {0}[{2}] set to {1}"),
    "cols_close": (lambda a, p: bool(np.all(np.abs(np.asarray(a[0]).sum(axis=0) - 1.0) <= 1e-9)),
                   "all(|{0}.sum(axis=0) - 1| <= 1e-9)"),
    "recvsum": (lambda a, p: _selsum(a[0], a[1], p.get("axis", -1), receivers=True), "{0}[{1}].sum(axis={axis})"),
    "mulrows": (lambda a, p: _mulrows(a[0], a[1], a[2]), "{0} with {0}[{2}] multiplied by {1}"),
    "readrows": (lambda a, p: _read_rows(a[0], p["how"], len(a[1])), "{how}"),
    "when": (lambda a, p: _branch(a[0], p["when"]), "{when}"),
    "close_mean": (lambda a, p: bool(abs(np.mean(a[0]) - 1.0) <= p["tol"] + p.get("rtol", 0.0)),
                   "|{0}.mean() - 1| <= {tol}"),
    "close_total": (lambda a, p: bool(abs(np.sum(a[0]) - np.size(a[0]))
                                      <= p["tol"] + p.get("rtol", 0.0) * np.size(a[0])), "|{0}.sum() - len({0})| <= {tol}"),
    "no_far": (lambda a, p: not bool(np.any(np.abs(a[0] - 1.0) > p["tol"])), "not any(|{0} - 1| > {tol})"),
    # one row's sum standing for all of them: the largest, or the smallest
    "close_max": (lambda a, p: _close(np.max(a[0], keepdims=True), p["tol"] + p.get("rtol", 0.0)),
                  "|{0}.max() - 1| <= {tol}"),
    "close_min": (lambda a, p: _close(np.min(a[0], keepdims=True), p["tol"] + p.get("rtol", 0.0)),
                  "|{0}.min() - 1| <= {tol}"),
    "close_rows": (lambda a, p: np.abs(a[0] - 1.0) <= p["tol"], "|{0} - 1| <= {tol}, row by row"),
    "nonneg_tol": (lambda a, p: bool(np.all(np.asarray(a[0]) >= -1e-9)), "all({0} >= -1e-9)"),
    "no_negative": (lambda a, p: not bool(np.any(np.asarray(a[0]) < 0)), "not any({0} < 0)"),
    "nonneg_rows": (lambda a, p: np.all(np.asarray(a[0]) >= 0, axis=-1), "all({0} >= 0, axis=-1)"),
    "and_rows": (lambda a, p: np.logical_and.reduce([np.asarray(x) for x in a]), " & ".join),
    "first_rows": (lambda a, p: np.asarray(a[0])[:1], "{0}[:1]"),
    "uniform": (lambda a, p: np.full(int(a[0]), 1.0 / a[1]), "np.full({0}, 1 / {1})"),
    "avg": (lambda a, p: np.mean(a[0], axis=p["axis"]), "{0}.mean(axis={axis})"),
    "median": (lambda a, p: np.median(a[0], axis=p["axis"]), "np.median({0}, axis={axis})"),
    "total": (lambda a, p: np.sum(a[0], axis=p["axis"]), "{0}.sum(axis={axis})"),
    "largest": (lambda a, p: np.max(a[0], axis=p["axis"]), "{0}.max(axis={axis})"),
    "lastrow": (lambda a, p: np.asarray(a[0])[-1], "{0}[-1]"),
    "firstrow": (lambda a, p: np.asarray(a[0])[0], "{0}[0]"),
    "sum_by": (lambda a, p: np.sum(a[0], axis=p["axis"]) / a[1], "{0}.sum(axis={axis}) / {1}"),
    "part": (lambda a, p: a[0][p["i"]], "{0}[{i}]"),
    "interv4": (lambda a, p: dict(zip(("weights_before", "weights_after", "output_before", "output_after"), a)),
                "{{…}}"),
    "values4": (lambda a, p: tuple(a), "({all})"),
    "recip": (lambda a, p: 1.0 / a[0], "1 / {0}"),
    "float32": (lambda a, p: np.asarray(a[0]).astype(np.float32), "{0}.astype(np.float32)"),
    "row": (lambda a, p: np.asarray(a[0])[None], "{0}[None, :]"),
    "skip_first": (lambda a, p: np.asarray(a[0])[1:], "{0}[1:]"),
    "skip_last": (lambda a, p: np.asarray(a[0])[:-1], "{0}[:-1]"),
    "uniform_like": (lambda a, p: np.full_like(a[0], 1.0 / np.shape(a[0])[-1]), "np.full_like({0}, 1 / {0}.shape[-1])"),
    # inserted stages
    "abs": (lambda a, p: np.abs(a[0]), "abs({0})"),
    "clip": (lambda a, p: np.clip(a[0], 0.0, 1.0), "np.clip({0}, 0, 1)"),
    "round": (lambda a, p: np.round(a[0], p.get("n", 0)), "np.round({0}, {n})"),
    "square_": (lambda a, p: np.square(a[0]), "{0} ** 2"),
    "neg": (lambda a, p: -a[0], "-{0}"),
    "dec": (lambda a, p: a[0] - 1, "{0} - 1"),
    "inc": (lambda a, p: a[0] + 1, "{0} + 1"),
    "double": (lambda a, p: 2 * a[0], "2 * {0}"),
    "per_row": (lambda a, p: a[0] / np.shape(a[0])[-2], "{0} / {0}.shape[-2]"),
    "per_col": (lambda a, p: a[0] / np.shape(a[0])[-1], "{0} / {0}.shape[-1]"),
    # the chapter's scaling done early: the queries or keys divided by the square root of their width
    "per_sqrt_col": (lambda a, p: a[0] / np.sqrt(np.shape(a[0])[-1]), "{0} / np.sqrt({0}.shape[-1])"),
    # the weights' softmax applied once more on the way out
    "softmax_": (lambda a, p: _softmax_rows(a[0]), "softmax_rows({0})"),
    "times_rows": (lambda a, p: a[0] * np.shape(a[0])[-2], "{0} * {0}.shape[-2]"),
    "residual": (lambda a, p: a[0] + a[1], "{0} + {1}"),
    # a residual connection kept only where it fits, as a block that checks the shapes first does
    "residual_if": (lambda a, p: a[0] + a[1] if np.shape(a[0]) == np.shape(a[1]) else a[0],
                    "{0} + {1} (where their shapes agree)"),
    # a value changed on its way in or out: normalized, cast, made hard
    "l2rows": (lambda a, p: a[0] / np.linalg.norm(a[0], axis=-1, keepdims=True),
               "{0} / np.linalg.norm({0}, axis=-1, keepdims=True)"),
    "sumrows": (lambda a, p: a[0] / np.sum(a[0], axis=-1, keepdims=True), "{0} / {0}.sum(axis=-1, keepdims=True)"),
    # each row standardized, as a layer norm does (its epsilon where PyTorch's and most code put it)
    "norm_std": (lambda a, p: (a[0] - np.mean(a[0], axis=-1, keepdims=True)) / (np.std(a[0], axis=-1, keepdims=True) + 1e-5),
                 "({0} - {0}.mean(axis=-1, keepdims=True)) / ({0}.std(axis=-1, keepdims=True) + 1e-5)"),
    "norm_var": (lambda a, p: (a[0] - np.mean(a[0], axis=-1, keepdims=True)) / np.sqrt(np.var(a[0], axis=-1, keepdims=True) + 1e-5),
                 "({0} - {0}.mean(axis=-1, keepdims=True)) / np.sqrt({0}.var(axis=-1, keepdims=True) + 1e-5)"),
    # centred over the positions: each coordinate's mean over the rows taken away
    "center": (lambda a, p: a[0] - np.mean(a[0], axis=-2, keepdims=True), "{0} - {0}.mean(axis=-2, keepdims=True)"),
    # a statistician's habits with a table's columns: z-scores, and min-max scaling to [0, 1]
    "zscore_cols": (lambda a, p: (a[0] - np.mean(a[0], axis=-2, keepdims=True)) / np.std(a[0], axis=-2, keepdims=True),
                    "({0} - {0}.mean(axis=-2)) / {0}.std(axis=-2)"),
    "minmax_cols": (lambda a, p: (a[0] - np.min(a[0], axis=-2, keepdims=True))
                    / (np.max(a[0], axis=-2, keepdims=True) - np.min(a[0], axis=-2, keepdims=True)),
                    "({0} - {0}.min(axis=-2)) / ({0}.max(axis=-2) - {0}.min(axis=-2))"),
    "f32": (lambda a, p: np.asarray(np.asarray(a[0]).astype(np.float32), dtype=np.float64), "np.float32({0})"),
    "f16": (lambda a, p: np.asarray(np.asarray(a[0]).astype(np.float16), dtype=np.float64), "np.float16({0})"),
    "trunc": (lambda a, p: np.trunc(a[0]), "{0}.astype(int)"),
    "onehot": (lambda a, p: _onehot(a[0]), "one_hot(argmax({0}, axis=-1))"),
    "log_": (lambda a, p: np.log(a[0]), "np.log({0})"),
    # a stage replaced by a relative of its operator
    "rowdot": (lambda a, p: np.sum(a[0] * _swap(a[1]), axis=-1), "({0} * {1}ᵀ).sum(axis=-1)"),
    "colsum_scale": (lambda a, p: np.sum(a[0], axis=-2)[..., None] * a[1], "{0}.sum(axis=0)[:, None] * {1}"),
    # a similarity other than the dot product: minus the squared distance of row i and column j
    "negdist": (lambda a, p: 2 * (a[0] @ a[1]) - np.sum(np.square(a[0]), axis=-1)[..., :, None]
                - np.sum(np.square(a[1]), axis=-2)[..., None, :], "-‖{0}[i] - {1}[:, j]‖²"),
    "half": (lambda a, p: a[0] / 2, "{0} ** 1 / 2"),
    "clipc": (lambda a, p: np.clip(a[0], -p["c"], p["c"]), "np.clip({0}, -{c}, {c})"),
    "logratio": (lambda a, p: a[0] - np.log(a[1]), "{0} - np.log({1})"),
    "logdiv": (lambda a, p: np.exp(np.log(a[0]) - np.log(a[1])), "np.exp(np.log({0}) - np.log({1}))"),
    "red_idx": (lambda a, p: getattr(np, p["red"])(a[0], axis=p["axis"])[:, None], "{0}.{red}(axis={axis})[:, None]"),
    "red_col": (lambda a, p: getattr(np, p["red"])(a[0], axis=p["axis"]).reshape(-1, 1),
                "{0}.{red}(axis={axis}).reshape(-1, 1)"),
    "precedence": (lambda a, p: a[0] / a[1] / 2, "{0} / {1} ** 1 / 2"),
    "stack": (lambda a, p: np.stack(a), "np.stack([{all}])"),
    # a sum written as a loop that assigns (`=`) where it should add (`+=`): only its last term is left
    "lastterm": (lambda a, p: a[0][..., -1:] @ a[1][..., -1:, :], "{0}[..., -1:] @ {1}[..., -1:, :]"),
    # a mix over the listed contributing rows alone (every row where rows is None)
    "selmix": (lambda a, p: a[0] @ a[1] if a[2] is None else a[0][:, _rows(a[2])] @ np.asarray(a[1])[_rows(a[2])],
               "{0}[:, {2}] @ {1}[{2}]"),
    # a sum written as a loop whose range is one short: its last term, or its first, left out
    "droplast": (lambda a, p: a[0][..., :-1] @ a[1][..., :-1, :], "{0}[..., :-1] @ {1}[..., :-1, :]"),
    "dropfirst": (lambda a, p: a[0][..., 1:] @ a[1][..., 1:, :], "{0}[..., 1:] @ {1}[..., 1:, :]"),
    # a mask that bars each position from itself (the diagonal), where none belongs
    "nodiag": (_matrix(lambda a, p: np.where(np.eye(np.shape(a[0])[-2], np.shape(a[0])[-1], dtype=bool), -np.inf, a[0])),
               "np.where(np.eye(T, dtype=bool), -np.inf, {0})"),
    # scores made symmetric, as if query i and key j ought to score each other alike
    "sym": (_matrix(lambda a, p: (a[0] + _swap(a[0])) / 2), "({0} + {0}ᵀ) / 2"),
    # one triangle of the scores computed, and mirrored into the other, as if they were symmetric
    "mirror_lower": (_matrix(lambda a, p: np.tril(a[0]) + _swap(np.tril(a[0], -1))), "np.tril({0}) + np.tril({0}, -1)ᵀ"),
    "mirror_upper": (_matrix(lambda a, p: np.triu(a[0]) + _swap(np.triu(a[0], 1))), "np.triu({0}) + np.triu({0}, 1)ᵀ"),
    # one triangle of the scores computed and the other left at zero, as a loop over j <= i leaves it
    # a causal mask: each position's later keys filled with -inf, or with a large negative number
    # as `masked_fill(mask, -1e9)` does
    "causal_inf": (_matrix(lambda a, p: _causal(a[0], -np.inf)), "np.where(np.tri(T, dtype=bool), {0}, -np.inf)"),
    "causal_1e9": (_matrix(lambda a, p: _causal(a[0], -1e9)), "np.where(np.tri(T, dtype=bool), {0}, -1e9)"),
    "tril": (_matrix(lambda a, p: np.tril(a[0])), "np.tril({0})"),
    "triu": (_matrix(lambda a, p: np.triu(a[0])), "np.triu({0})"),
    # a running total down the positions: an accumulator kept from one row to the next, never reset
    "cumrows": (_matrix(lambda a, p: np.cumsum(a[0], axis=-2)), "np.cumsum({0}, axis=-2)"),
    # the same over every row of every example in turn, as a loop over the rows of a flattened batch keeps it
    "cumall": (lambda a, p: np.cumsum(np.reshape(a[0], (-1, np.shape(a[0])[-1])), axis=0).reshape(np.shape(a[0])),
               "np.cumsum({0}.reshape(-1, {0}.shape[-1]), axis=0).reshape({0}.shape)"),
    # an accumulator started from another value than the reduction's own: a sum from 1, a maximum
    # from 0 (so never below it), a minimum from 0
    "plus_one": (lambda a, p: a[0] + 1.0, "{0} + 1"),
    "floor0": (lambda a, p: np.maximum(a[0], 0.0), "max({0}, 0)"),
    "ceil0": (lambda a, p: np.minimum(a[0], 0.0), "min({0}, 0)"),
}
# What each of those says, of the reduction it follows.
STARTED_FROM = {"plus_one": ("sum", "1"), "floor0": ("max", "0"), "ceil0": ("min", "0")}


def _axis(a, axis):
    """numpy's axis, or every axis but the first for REST: what a loop over `s[i]` reduces."""
    return tuple(range(1, np.ndim(a))) if axis == REST else (-2, -1) if axis == LAST_TWO else axis


def _onehot(a):
    a = np.asarray(a)
    return (np.arange(a.shape[-1]) == np.argmax(a, axis=-1)[..., None]).astype(float)


# Swapped or inverted operators: op -> alternatives (with their words).
SWAPS: dict[str, tuple[str, ...]] = {
    "matmul": ("mul", "dot", "inner"), "mul": ("div", "matmul"), "div": ("mul", "rdiv", "sub"), "sub": ("add",), "add": ("sub",),
    "sqrt": ("square", "same", "log", "isqrt"), "exp": ("log", "same", "square", "exp2"), "max": ("min", "mean", "sum"),
    "sum": ("mean", "max"), "lastdim": ("firstdim", "size"), "zeros": ("ones",), "selsum": ("rowselsum", "selmean", "selmax"),
    "addrows": ("addall", "subrows"), "pair": ("pair_rev",), "ndim2": ("ndim_at_least_2", "square"), "nonneg": ("positive", "nonneg_any"),
    "close": ("close_first", "close_any", "close_below", "close_rel"),
}
# The exercises' own: a related quantity in place of the asked one, a test phrased or bounded otherwise.
SWAPS["close"] += ("close_mean", "close_total", "no_far", "close_max", "close_min")
SWAPS["nonneg"] += ("nonneg_tol", "no_negative")
SWAPS["lastdim"] += ("axes_count", "dim1")
SWAPS["ndim2"] += ("len2",)
SWAPS["max"] += ("median_k",)  # a row's middle number taken for its largest
SWAPS["pair"] += ("pair_batch",)
SWAPS["selsum"] += ("recvsum", "selmin", "selmedian")
SWAPS["addrows"] += ("mulrows", "setrows")
SWAPS["outer"] = ("mul",)
SWAPS["avg"] = ("median", "total", "largest", "lastrow", "firstrow")
# Further relatives of an operator, kept apart so that the lists above stay as they were.
MORE_SWAPS: dict[str, tuple[str, ...]] = {"matmul": ("rowdot", "colsum_scale"), "sqrt": ("half", "zero_power"),
                                          "sub": ("div",), "exp": ("expm1", "exp10"), "T": ("reshape_t",)}
# Relatives of one stage's operator alone, by the stage's name: a similarity other than the dot
# product, for the scores.
STAGE_SWAPS: dict[str, tuple[str, ...]] = {"d": ("negdist",)}
# A test of a predicate swapped for another, written with numpy's own comparison, whose default
# tolerance (1e-8 + 1e-5 of what it compares with) is far looser than the asked 1e-9: each such
# test as numpy would phrase it.
NUMPY_PHRASED = {"close_first": "np.isclose({0}[0], 1)", "close_any": "np.isclose({0}, 1).any()",
                 "close_mean": "np.isclose({0}.mean(), 1)", "close_total": "np.isclose({0}.sum(), len({0}))"}
# An overflow guard written as a clip of the scores at ± one of these, in place of a shift.
CLIP_BOUNDS = (10, 20, 30, 40, 50, 60, 80, 88, 100, 200, 500, 700, 709, 1000)
# Changes made to an input as the function starts (each input alone, then every array input at once).
INPUT_CHANGES = ("f32", "trunc", "l2rows", "norm_std", "norm_var", "center", "zscore_cols", "minmax_cols")
# ... and in the exercises, the first or the last row left out (a loop over the rows that starts at
# 1 or stops one short, `range(1, len(a))`, `range(len(a) - 1)`, never looks at it), or NaN read as 0.
INPUT_CHANGES_EX = ("skip_first", "skip_last", "nan_to_num")
# Decimals a test may round its numbers to before comparing them with 1 exactly.
ROUNDINGS_COMPARED = (4, 6, 8, 9)
# Changes to one operand, and stages inserted after one, beyond the lists above.
MORE_OPERAND_CHANGES = ("l2rows", "f32", "onehot")
MORE_INSERTS = ("f32", "f16", "trunc", "l2rows", "sumrows", "log_", "sumcols", "reflow", "squeeze")
# Stages inserted after a line that computes an array (of rows), beyond those.
ARRAY_INSERTS = ("cumrows",)
# Inserted only in the function whose contract takes rows of any batch ([..., T, T]), whose loop
# over them is written over the rows of the batch flattened: a running total across all of them.
ROWS_INSERTS = {"softmax_rows": ("cumall",)}
# Operators a unary stage may be moved outside of: `√(d / d_k)` for `d / √d_k`.
OUTWARD = {"sqrt", "exp", "log", "square"}
REDUCTIONS = {"max": "max", "min": "min", "sum": "sum", "mean": "mean"}
AXES = (-2, 0, 1, None)
# Every axis but the first, as a loop over the first axis reduces each slice whole: the rows of a
# matrix, but the whole matrix of each example in a batch. Tried for every reduction at once.
REST = "1:"
# The last two axes at once (`axis=(-2, -1)`): each matrix reduced whole, a batch's examples apart.
LAST_TWO = "-2:"
TOLERANCES = (0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-3)
MASKS = ("causal_inf", "causal_1e9")
INSERTS = ("abs", "clip", "round", "T", "residual", "square_", "per_row", "per_col", "times_rows", "per_sqrt_col") + MASKS
ROUNDINGS = (0, 2, 3, 4, 6)
# What may happen to one operand on its way into a stage.
OPERAND_CHANGES = ("square_", "abs", "T", "neg", "double")
SIZE_CHANGES = ("dec", "inc")  # ... and what may happen to a size (an int)
# Conditions a predicate may add: each a stage whose value joins the final `and`.
ADDED_CONDITIONS = ("at_most_one", "square_matrix", "positive", "cols_close")
# The exercises (EXERCISES) also see these: an operand cast to float32, kept as a [1, n] row, or
# replaced by uniform weights; another value in scope added to it or taken from it; a reciprocal
# after a stage; the row list read in the ways `rows` goes wrong (ROWS_READ); a program-wide
# rewrite of every test at once (FAMILIES).
EXERCISES = frozenset({"zero_query_mixture", "is_attention_weights", "shifted_output", "output_change",
                       "head_facts", "value_intervention"})
OPERAND_CHANGES_EX = ("float32", "row", "uniform_like")
INSERTS_EX = ("recip",)
ROWS_READ = {"falsy": ("rows = None if not rows else rows", "an empty list was taken for None (`if not rows:`), "
                       "so it moved every row"),
             "first": ("rows = [rows[0]]", "only the first listed row (rows[0]) was used"),
             "mask": ("rows = np.array(rows, dtype=bool)", "the row indices were used as a boolean mask"),
             "span": ("rows = range(rows[0], rows[-1])", "the listed rows were read as a span, from the first "
                      "listed row up to the last, which was left out (a slice `rows[0]:rows[-1]`)"),
             "span_through": ("rows = range(rows[0], rows[-1] + 1)", "the listed rows were read as a span, every "
                              "row from the first listed to the last (a slice `rows[0]:rows[-1] + 1`)"),
             "span_minmax": ("rows = range(min(rows), max(rows))", "the listed rows were read as a span, from the "
                             "lowest listed row up to the highest, which was left out (a slice `min(rows):max(rows)`)"),
             "span_minmax_through": ("rows = range(min(rows), max(rows) + 1)", "the listed rows were read as a span, "
                                     "every row from the lowest listed to the highest (a slice "
                                     "`min(rows):max(rows) + 1`)"),
             "none_nothing": ("rows = rows or []", "rows=None was read as no row at all"),
             "none_but_last": ("rows = range(T - 1) if rows is None else rows",
                               "rows=None was read as every row but the last"),
             "none_but_first": ("rows = range(1, T) if rows is None else rows",
                                "rows=None was read as every row but the first")}
FAMILIES = {"nan_blind": ({"nonneg": "no_negative", "close": "no_far"},
                          "every test was phrased as 'no violation found' (`not any(...)`), which lets NaN through"),
            "per_row": ({"nonneg": "nonneg_rows", "close": "close_rows", "and": "and_rows"},
                        "every test was kept row by row, and the per-row array returned instead of one bool")}

Stage = tuple  # (name, op, args, params)


def _st(name, op, args, **params) -> Stage:
    return (name, op, tuple(args), params)


def _softmax(s: str) -> list[Stage]:
    return [_st("m", "max", (s,), axis=-1), _st("shifted", "sub", (s, "m")), _st("e", "exp", ("shifted",)),
            _st("z", "sum", ("e",), axis=-1), _st("a", "div", ("e", "z"))]


def _compare(q="q", k="k", d_k_from="q") -> list[Stage]:
    return [_st("d_k", "lastdim", (d_k_from,)), _st("k_t", "T", (k,)), _st("d", "matmul", (q, "k_t")),
            _st("r", "sqrt", ("d_k",)), _st("s", "div", ("d", "r"))]


_PROJECT = [_st("q", "matmul", ("x", "w_q")), _st("k", "matmul", ("x", "w_k")), _st("v", "matmul", ("x", "w_v"))]

# The reference, function by function: inputs (name, kind) and stages. Kinds: array, int, rows, bool.
PROGRAMS: dict[str, tuple[tuple[tuple[str, str], ...], list[Stage]]] = {
    "project_qkv": ((("x", "array"), ("w_q", "array"), ("w_k", "array"), ("w_v", "array")),
                    _PROJECT + [_st("return", "tuple", ("q", "k", "v"))]),
    "scores": ((("q", "array"), ("k", "array")),
               [_st("k_t", "T", ("k",)), _st("d", "matmul", ("q", "k_t")), _st("return", "one", ("d",))]),
    "scale": ((("d", "array"), ("d_k", "int")),
              [_st("r", "sqrt", ("d_k",)), _st("s", "div", ("d", "r")), _st("return", "one", ("s",))]),
    "softmax_rows": ((("s", "array"),), _softmax("s") + [_st("return", "one", ("a",))]),
    "mix": ((("a", "array"), ("v", "array")), [_st("o", "matmul", ("a", "v")), _st("return", "one", ("o",))]),
    "attention": ((("q", "array"), ("k", "array"), ("v", "array")),
                  _compare() + _softmax("s") + [_st("o", "matmul", ("a", "v")), _st("return", "tuple", ("o", "a"))]),
    "self_attention_head": ((("x", "array"), ("w_q", "array"), ("w_k", "array"), ("w_v", "array")),
                            _PROJECT + _compare() + _softmax("s")
                            + [_st("o", "matmul", ("a", "v")), _st("return", "tuple", ("o", "a"))]),
    "zero_query_mixture": ((("k", "array"), ("v", "array")),
                           [_st("d_k", "lastdim", ("k",)), _st("q", "zeros", ("d_k",)), _st("d", "matmul", ("k", "q")),
                            _st("r", "sqrt", ("d_k",)), _st("s", "div", ("d", "r"))] + _softmax("s")
                           + [_st("o", "matmul", ("a", "v")), _st("return", "tuple", ("a", "o"))]),
    "is_attention_weights": ((("a", "array"),),
                             [_st("is_2d", "ndim2", ("a",)), _st("_", "guard", ("is_2d",)),
                              _st("sums", "rowsum", ("a",), axis=1), _st("sums_ok", "close", ("sums",), tol=1e-9),
                              _st("signs_ok", "nonneg", ("a",)), _st("return", "and", ("signs_ok", "sums_ok"))]),
    "shifted_output": ((("a", "array"), ("v", "array"), ("shift", "array"), ("rows", "rows")),
                       [_st("o_old", "matmul", ("a", "v")),  # the output before the shift, for comparison
                        _st("v_new", "addrows", ("v", "shift", "rows")), _st("o", "matmul", ("a", "v_new")),
                        _st("return", "one", ("o",))]),
    "output_change": ((("a", "array"), ("shift", "array"), ("rows", "rows")),
                      [_st("moved", "selsum", ("a", "rows"), axis=-1), _st("c", "outer", ("moved", "shift")),
                       _st("return", "one", ("c",))]),
    "value_intervention": ((("x", "array"), ("w_q", "array"), ("w_k", "array"), ("w_v", "array"),
                            ("w_v_new", "array")),
                           [_st("before", "head", ("x", "w_q", "w_k", "w_v")),
                            _st("o_b", "part", ("before",), i=0), _st("a_b", "part", ("before",), i=1),
                            _st("after", "head", ("x", "w_q", "w_k", "w_v_new")),
                            _st("o_a", "part", ("after",), i=0), _st("a_a", "part", ("after",), i=1),
                            _st("return", "interv4", ("a_b", "a_a", "o_b", "o_a"))]),
    "head_facts": ((("t", "int"), ("d_k", "int"), ("d_v", "int")),
                   [_st("r", "sqrt", ("d_k",)), _st("divisor", "float", ("r",)),
                    _st("score_shape", "pair", ("t", "t")), _st("output_shape", "pair", ("t", "d_v")),
                    _st("softmax_axis", "const", (), value=-1),
                    _st("return", "facts", ("divisor", "score_shape", "output_shape", "softmax_axis"))]),
}

# Other ways the same function is commonly written, each giving the reference's values: edited too.
# form -> stages; a form's codes carry its name (`derived-<function>-<stage>-<form>-<edit>`).
_UNIFORM = [_st("t", "firstdim", ("k",)), _st("d_k", "lastdim", ("k",)), _st("d_v", "lastdim", ("v",)),
            _st("a", "uniform", ("t", "t"))]
FORMS: dict[str, dict[str, list[Stage]]] = {
    "softmax_rows": {
        # the log-sum-exp form: a = exp(s - lse), lse = m + log(sum(exp(s - m)))
        "lse": [_st("m", "max", ("s",), axis=-1), _st("shifted", "sub", ("s", "m")), _st("e", "exp", ("shifted",)),
                _st("z", "sum", ("e",), axis=-1), _st("lz", "log", ("z",)), _st("lsum", "add", ("m", "lz")),
                _st("sl", "sub", ("s", "lsum")), _st("a", "exp", ("sl",)), _st("return", "one", ("a",))],
    },
    "zero_query_mixture": {
        # the closed form: equal weights 1/T, mixed or averaged
        "uniform": _UNIFORM + [_st("o", "matmul", ("a", "v")), _st("return", "tuple", ("a", "o"))],
        "mean": _UNIFORM + [_st("o", "avg", ("v",), axis=0), _st("return", "tuple", ("a", "o"))],
    },
    "value_intervention": {
        # the weights do not depend on W_V: the new values mixed with the old weights
        "reuse": [_st("before", "head", ("x", "w_q", "w_k", "w_v")),
                  _st("o_b", "part", ("before",), i=0), _st("a_b", "part", ("before",), i=1),
                  _st("v_a", "matmul", ("x", "w_v_new")), _st("o_a", "matmul", ("a_b", "v_a")),
                  _st("return", "interv4", ("a_b", "a_b", "o_b", "o_a"))],
        # the head is linear in the values: the old output plus the change of the values, mixed
        "delta": [_st("before", "head", ("x", "w_q", "w_k", "w_v")),
                  _st("o_b", "part", ("before",), i=0), _st("a_b", "part", ("before",), i=1),
                  _st("w_d", "sub", ("w_v_new", "w_v")), _st("v_d", "matmul", ("x", "w_d")),
                  _st("o_d", "matmul", ("a_b", "v_d")), _st("o_a", "add", ("o_b", "o_d")),
                  _st("return", "interv4", ("a_b", "a_b", "o_b", "o_a"))],
    },
}

# What each name stands for, in the chapter's words; and the section that teaches each stage.
WORDS = {
    "x": "the input x", "w_q": "W_Q", "w_k": "W_K", "w_v": "W_V", "q": "the queries", "k": "the keys",
    "v": "the values", "k_t": "the transposed keys", "d": "the scores D", "s": "the scaled scores S",
    "r": "the divisor √d_k", "d_k": "d_k", "d_v": "d_v", "t": "T", "m": "the row maxima",
    "shifted": "the shifted scores", "e": "the exponentials", "z": "the row totals", "a": "the weights",
    "o": "the output", "v_new": "the shifted value rows", "moved": "the weight on the moved rows",
    "c": "the change", "shift": "the shift", "rows": "the listed rows", "sums": "the row sums",
    "is_2d": "the 2-D test", "sums_ok": "the row-sum test", "signs_ok": "the sign test",
    "all": "its reductions", "divisor": "the divisor", "score_shape": "the score shape", "output_shape": "the output shape",
    "o_old": "the output before the shift", "before": "the head's result before", "after": "the head's result after",
    "o_b": "output_before", "a_b": "weights_before", "o_a": "output_after", "a_a": "weights_after",
    "w_v_new": "the new W_V", "v_a": "the new values", "softmax_axis": "the softmax axis",
    "lz": "the log of the row totals", "lsum": "the log-sum-exp", "sl": "the scores less the log-sum-exp",
    "w_d": "the change of W_V", "v_d": "the change of the values", "o_d": "the change of the output",
}
SECTIONS = {"q": "§15.1", "k": "§15.1", "v": "§15.1", "k_t": "§15.2", "d": "§15.2", "d_k": "§15.3", "r": "§15.3",
            "s": "§15.3", "m": "§15.3", "shifted": "§15.3", "e": "§15.3", "z": "§15.3", "a": "§15.3", "o": "§15.4",
            "v_new": "§15.5", "moved": "§15.5", "c": "§15.5"}
OP_WORDS = {
    "mul": "an elementwise product", "matmul": "a matrix product", "div": "a division", "rdiv": "the division upside down",
    "add": "an addition", "sub": "a subtraction", "square": "a square", "same": "nothing", "log": "a logarithm",
    "exp": "an exponential", "min": "a minimum", "mean": "a mean", "sum": "a sum", "max": "a maximum",
    "firstdim": "the first axis's length", "size": "the count of all its numbers",
    "dim1": "the second axis's length, counted from the front",
    "axes_count": "the number of its axes (`.ndim`)",
    "dot": "`np.dot`, which on a batch pairs every example with every other",
    "inner": "`np.inner`, which pairs the last axis of both arrays (`a @ bᵀ` for two matrices)", "ones": "ones", "rowselsum": "the weights of the listed receiving rows",
    "addall": "every value row shifted", "ndim_at_least_2": "at least 2-D",
    "len2": "a test of the length (the rows counted, `len(a) == 2`)", "square": "a square test",
    "positive": "strictly positive entries", "nonneg_any": "any non-negative entry",
    "close_first": "the first row's sum only", "close_any": "any row summing to one",
    "close_below": "the sums compared without their absolute value", "close_rel": "np.allclose's default tolerance",
    "close_mean": "only the mean row sum compared with one", "close_total": "only the total compared with the row count",
    "no_far": "a test for no row far from one (which NaN passes)",
    "close_max": "only the greatest row sum compared with one", "close_min": "only the least row sum compared with one",
    "nonneg_tol": "a test that accepts entries down to -1e-9",
    "no_negative": "a test for no negative entry (which NaN passes)", "recvsum": "the receiving rows a[rows] summed",
    "mulrows": "the listed rows multiplied by the shift", "outer": "an outer product", "avg": "a mean",
    "median": "a median", "median_k": "a median", "total": "a sum", "largest": "a maximum", "lastrow": "the last row", "firstrow": "the first row",
    "selsum": "a sum", "interv4": "a dict", "values4": "a tuple of the values",
    "selmax": "a maximum", "selmean": "a mean", "selmin": "a minimum", "selmedian": "a median",
    "setrows": "the listed rows set to the shift", "ndim2": "exactly 2-D", "nonneg": "a non-negativity test",
    "close": "the row-sum test", "addrows": "the shift added to the listed rows",
    "sqrt": "a square root", "isqrt": "a square root rounded down", "exp2": "a power of two", "exp10": "a power of ten", "reshape_t": "a reshape to the transposed shape",
    "lastdim": "the last axis's length", "subrows": "the shift subtracted from the listed rows",
    "pair": "the pair of sizes", "pair_rev": "the pair of sizes in reverse order",
    "pair_batch": "the sizes with a leading 1 (a batch of one)",
}


@dataclass(frozen=True)
class Edit:
    fn: str
    code: str
    program: tuple
    old: str
    """The reference's line."""
    new: str
    """The line as the student's numbers say it was computed."""
    why: str
    """What the edit changed, in words."""
    section: str
    at: int = -1
    """The stage the edit replaces, for composing two edits; -1 when it is not one stage's edit."""
    rep: tuple = ()
    """What replaces that stage."""
    what: str = ""
    """The whole first sentence, where "with `new` in place of `old`" would not say it."""
    look: str = ""
    """Where to look, where "the line that computes …" would not say it."""


EXAMPLE_SIZE = "-example-"
"""In the code of an edit that writes a size in as the chapter's example has it (`d_k` as 2)."""


def _code(fn: str, stage: str, label: str) -> str:
    """`derived-<function>-<stage>-<edit>`, in the characters a results file allows for a code."""
    text = f"{stage}-{label}".replace("->", "-to-").replace(":", "-").replace("'", "").replace(".", "p")
    return f"derived-{fn}-" + re.sub(r"[^a-z0-9_-]", "_", text.lower())


def _reduction(op: str) -> str:
    """The reduction an operation's line performs, in numpy's word ("sum" for `a[:, rows].sum(...)`)."""
    found = re.search(r"(?:\.|np\.)(sum|mean|max|min|median)\(", OPS[op][1])
    return found.group(1) if found else op


def _line(stage: Stage) -> str:
    name, op, args, params = stage
    template = OPS[op][1]
    if op == "and":
        body = " and ".join(args)
    elif op == "and_rows":
        body = " & ".join(args)
    elif op in ("tuple", "values4"):
        body = "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
    elif op == "stack":
        body = "np.stack([" + ", ".join(args) + "])"
    elif op in ("facts", "intervention"):
        body = "{" + ", ".join(args) + "}"
    elif op == "interv4":
        body = "{" + ", ".join(f"{key}: {arg}" for key, arg in zip(
            ("weights_before", "weights_after", "output_before", "output_after"), args)) + "}"
    elif op == "readrows":
        return ROWS_READ[params["how"]][0]
    else:
        shown = {k: ("None" if v is None else "(-2, -1)" if v == LAST_TWO else v) for k, v in params.items()}
        body = template.format(*args, **shown)
    return f"return {body}" if name == "return" else (body if name == "_" else f"{name} = {body}")


_BOOLS = ("ndim2", "guard", "close", "nonneg", "and") + tuple(
    op for ops in (SWAPS["close"], SWAPS["nonneg"]) for op in ops)


def _kinds(fn: str, stages: list[Stage] | None = None) -> dict[str, str]:
    inputs, main = PROGRAMS[fn]
    kinds = dict(inputs)
    for name, op, args, _ in main if stages is None else stages:
        if op in ("lastdim", "firstdim", "size", "dec", "inc"):
            kinds[name] = "int"
        elif op in ("sqrt", "float"):
            kinds[name] = "scalar" if kinds.get(args[0]) in ("int", "scalar") else "array"
        elif op in _BOOLS:
            kinds[name] = "bool"
        elif op in ("pair", "const", "tuple", "facts", "head", "intervention", "interv4"):
            kinds[name] = op
        else:
            kinds[name] = "array"
    return kinds


@lru_cache(maxsize=None)
def _example_sizes() -> dict[str, int]:
    """The sizes of the chapter's worked example, by the names the programs give them."""
    from .cases import example_arrays

    example = example_arrays()
    return {"t": example["X"].shape[0], "d_k": example["W_Q"].shape[1], "d_v": example["W_V"].shape[1]}


# The kinds of edit tried in a form where not every kind is (a form that adds stages to the
# reference's own, whose other edits mostly give the same numbers as the reference's edits).
FORM_KINDS = {("softmax_rows", "lse"): {"skip", "partial_skip", "twice", "op", "axis", "axes", "keepdims"}}


def _edits(fn: str) -> list[Edit]:
    """Every edit of `fn`'s program, then of each other form it is commonly written in."""
    found = _edits_of(fn, PROGRAMS[fn][1], "")
    for form, stages in FORMS.get(fn, {}).items():
        kinds = FORM_KINDS.get((fn, form))
        found += [edit for edit in _edits_of(fn, stages, form)
                  if kinds is None or edit.code.split(f"-{form}-", 1)[1].split("-")[0] in kinds]
    return found


def _edits_of(fn: str, stages: list[Stage], form: str) -> list[Edit]:
    inputs, _ = PROGRAMS[fn]
    kinds = _kinds(fn, stages)
    found: list[Edit] = []
    exercise = fn in EXERCISES
    branches = exercise and "rows" in dict(inputs)
    # a stage's own section where it has one (SECTIONS), else that of the first step the function is graded in
    section = next(step.section for step in STEPS if fn in step.functions)

    def add(i, new_stages, new_line, why, label, restrict=True, old=None, what="", look="", stage_name=None):
        stage = stages[i]
        label = f"{form}:{label}" if form else label
        code = _code(fn, stage_name or (stage[0] if stage[0] != "_" else "guard"), label)
        old = _line(stage) if old is None else old
        # one stage of the reference's own program replaced: such an edit may be paired with another
        tail = len(stages) - i - 1
        local = (not form and list(new_stages[:i]) == list(stages[:i]) and len(new_stages) > i + tail
                 and list(new_stages[len(new_stages) - tail:]) == list(stages[i + 1:]))
        found.append(Edit(fn, code, tuple(new_stages), old, new_line, why, SECTIONS.get(stage[0], section),
                          i if local else -1, tuple(new_stages[i:len(new_stages) - tail]) if local else (),
                          what, look))
        if branches and restrict:
            # the same edit in one branch of `if rows is None:` only, the other as the reference's
            for when, words in (("none", "rows is None"), ("rows", "rows is a list")):
                guard = ("_", "when", ("rows",), {"when": "none" if when == "none" else "given"})
                # where rows is None every row moves: the lines are shown as they read for every row
                shown = _every_row if when == "none" else str
                found.append(Edit(fn, _code(fn, stage[0], f"{label}:when_{when}"), (guard,) + tuple(new_stages),
                                  shown(old), f"{shown(new_line)} (only where {words})",
                                  f"{shown(why)}, only where {words}", SECTIONS.get(stage[0], section)))

    def whole(label, program, old, new, why, sec=None):
        label = f"{form}:{label}" if form else label
        found.append(Edit(fn, _code(fn, "all", label), tuple(program), old, new, why, sec or section))

    # Every reduction moved to another axis at once: `axis=1` written throughout, say.
    reducing = [i for i, stage in enumerate(stages) if stage[3].get("axis") == -1]
    if len(reducing) > 1:
        if all(stages[i][1] in REDUCTIONS for i in reducing):
            program = [(n, o, a, {**p, "axis": REST}) if i in reducing else (n, o, a, p)
                       for i, (n, o, a, p) in enumerate(stages)]
            code = _code(fn, "all", (f"{form}:" if form else "") + "axes:-1->rest")
            found.append(Edit(fn, code, tuple(program), "axis=-1", "axis=(1, …, ndim - 1)",
                              "every reduction ran over every axis but the first, as a loop over the first axis "
                              "does that reduces each slice whole: the same as axis=-1 on one matrix, but over "
                              "each example's whole matrix in a batch", SECTIONS.get("a", "§15.3")))
        for axis in AXES:
            program = [(n, o, a, {**p, "axis": axis}) if i in reducing else (n, o, a, p)
                       for i, (n, o, a, p) in enumerate(stages)]
            code = _code(fn, "all", (f"{form}:" if form else "") + f"axes:-1->{axis}")
            found.append(Edit(fn, code, tuple(program), "axis=-1", f"axis={axis}",
                              f"every reduction ran over {'the whole array' if axis is None else f'axis {axis}'}, "
                              f"not the last axis", SECTIONS.get("a", "§15.3")))
    if exercise:
        # Every test of a predicate rewritten the same way at once.
        for family, (mapping, why) in FAMILIES.items():
            if any(op in mapping for _, op, _, _ in stages if op != "and"):
                program = [(n, mapping.get(o, o), a, p) for n, o, a, p in stages]
                changed = [_line(st) for st, new in zip(stages, program) if st[1] != new[1]]
                whole(family, program, "; ".join(changed),
                      "; ".join(_line(st) for st, new in zip(stages, program) if st[1] != new[1] for st in (new,)), why)
        # The row list read wrongly, for every stage that uses it.
        if branches:
            first = next(n for n, kind in inputs if kind == "array")
            for how, (line, why) in ROWS_READ.items():
                program = [("rows", "readrows", ("rows", first), {"how": how})] + list(stages)
                found.append(Edit(fn, _code(fn, "rows", f"{form}:read:{how}" if form else f"read:{how}"),
                                  tuple(program), "rows  # as given", line, why, "§15.5"))
        # Only the first row of an input checked, after the shape test.
        guards = [i for i, st in enumerate(stages) if st[1] == "guard"]
        if guards:
            at = guards[-1] + 1
            for inp, kind in inputs:
                if kind == "array":
                    narrow = (inp, "first_rows", (inp,), {})
                    add(guards[-1], list(stages[:at]) + [narrow] + list(stages[at:]),
                        f"{_line(stages[guards[-1]])}; {inp} = {inp}[:1]",
                        f"only the first row of {inp} was checked", f"narrow:{inp}")
        # Two parts of one result unpacked in the wrong order (in one run, or in every run alike).
        pairs = [i for i in range(len(stages) - 1) if stages[i][1] == stages[i + 1][1] == "part"
                 and stages[i][2] == stages[i + 1][2]]
        swapped = list(stages)
        for i in pairs:
            (n1, o1, a1, p1), (n2, o2, a2, p2) = stages[i], stages[i + 1]
            program = list(stages[:i]) + [(n1, o1, a1, p2), (n2, o2, a2, p1)] + list(stages[i + 2:])
            add(i, program, f"{n2}, {n1} = {a1[0]}", f"the two parts of {WORDS.get(a1[0], a1[0])} were "
                f"unpacked in the wrong order", "unpack:swapped")
            swapped[i], swapped[i + 1] = (n1, o1, a1, p2), (n2, o2, a2, p1)
        if len(pairs) > 1:
            whole("unpack_swapped", swapped, "; ".join(f"{stages[i][0]}, {stages[i + 1][0]} = {stages[i][2][0]}"
                                                       for i in pairs),
                  "; ".join(f"{stages[i + 1][0]}, {stages[i][0]} = {stages[i][2][0]}" for i in pairs),
                  "every result was unpacked in the wrong order")
        # A call repeated with one argument changed: the change made at another argument.
        for i, (n1, o1, a1, p1) in enumerate(stages):
            for k, (n2, o2, a2, p2) in enumerate(stages):
                if k <= i or o1 != o2 or o1 != "head" or len(a1) != len(a2):
                    continue
                differ = [j for j in range(len(a1)) if a1[j] != a2[j]]
                if len(differ) != 1:
                    continue
                j = differ[0]
                for m, arg in enumerate(a1):
                    if m != j and kinds.get(arg) == kinds.get(a2[j]):
                        new = (n2, o2, a1[:m] + (a2[j],) + a1[m + 1:], p2)
                        add(k, list(stages[:k]) + [new] + list(stages[k + 1:]), _line(new),
                            f"{WORDS.get(a2[j], a2[j])} went in at the place of {WORDS.get(arg, arg)}, not of "
                            f"{WORDS.get(a1[j], a1[j])}", f"slot:{a1[j]}->{arg}")
                # the same operand changed in both calls
                for m, arg in enumerate(a1):
                    if m == j or kinds.get(arg) != "array":
                        continue
                    for change in OPERAND_CHANGES + OPERAND_CHANGES_EX:
                        inner = (f"{arg}'", change, (arg,), {})
                        one = (n1, o1, a1[:m] + (f"{arg}'",) + a1[m + 1:], p1)
                        two = (n2, o2, a2[:m] + (f"{arg}'",) + a2[m + 1:], p2)
                        program = list(stages[:i]) + [inner, one] + list(stages[i + 1:k]) + [two] + list(stages[k + 1:])
                        shown = OPS[change][1].format(arg)
                        add(k, program, f"{_line(one)}; {_line(two)}".replace(f"{arg}'", f"({shown})"),
                            f"{WORDS.get(arg, arg)} went in as `{shown}` in both calls", f"both:{arg}:{change}")
    for i, stage in enumerate(stages):
        name, op, args, params = stage
        scope = [n for n, _ in inputs] + [s[0] for s in stages[:i] if s[0] not in ("_", "return")]
        scope = list(dict.fromkeys(scope))
        before, after = list(stages[:i]), list(stages[i + 1:])
        if exercise and op not in ("and", "guard", "readrows", "when"):
            # two operands of one kind exchanged: the keys of a dict, the factors of a product
            for j in range(len(args)):
                for m in range(j + 1, len(args)):
                    if args[j] != args[m] and kinds.get(args[j]) == kinds.get(args[m]) \
                            and kinds.get(args[j]) in ("array", "int"):
                        exchanged = list(args)
                        exchanged[j], exchanged[m] = args[m], args[j]
                        new = (name, op, tuple(exchanged), params)
                        one, other = WORDS.get(args[j], args[j]), WORDS.get(args[m], args[m])
                        add(i, before + [new] + after, _line(new), f"{one} and {other} were exchanged",
                            f"exchange:{args[j]}-{args[m]}",
                            look=f"Find where `{fn}` computes {one} and {other}, and check that each is "
                                 f"computed as its name says and used where `{_line(stage)}` uses it.")
        # An operand replaced by another value of its kind in scope.
        for j, arg in enumerate(args):
            for other in scope:
                if other == arg or kinds.get(other) != kinds.get(arg) or (op == "pair" and other == arg):
                    continue
                if kinds.get(arg) == "bool":
                    continue
                new_args = args[:j] + (other,) + args[j + 1:]
                new = (name, op, new_args, params)
                # an operand used twice: which use was replaced
                which = f"#{j + 1}" if exercise and args.count(arg) > 1 else ""
                add(i, before + [new] + after, _line(new),
                    f"{WORDS.get(arg, arg)} {_were(arg)} replaced by "
                    f"{WORDS.get(other, other)}" + (f" in its {('first', 'second')[min(j, 1)]} use" if which else ""),
                    f"operand:{arg}{which}->{other}")
                if exercise and args.count(arg) > 1 and j == args.index(arg):
                    new = (name, op, tuple(other if a == arg else a for a in args), params)
                    add(i, before + [new] + after, _line(new),
                        f"{WORDS.get(arg, arg)} {_were(arg)} replaced by {WORDS.get(other, other)} wherever {_it(arg)} used",
                        f"operand:all:{arg}->{other}")
        # A size written in as the chapter's example has it, where the call's own belongs (in one use).
        for j, arg in enumerate(args):
            value = _example_sizes().get(arg)
            if kinds.get(arg) != "int" or value is None:
                continue
            literal = f"{arg}#example"
            new = (name, op, args[:j] + (literal,) + args[j + 1:], params)
            which = f" in its {('first', 'second')[min(j, 1)]} use" if args.count(arg) > 1 else ""
            add(i, before + [(literal, "const", (), {"value": value}), new] + after,
                _line(new).replace(literal, str(value)),
                f"{WORDS.get(arg, arg)}{which} was written in as {value}, the chapter's example's, where the "
                f"call's own belongs", f"example:{arg}" + (f"#{j + 1}" if which else ""))
        # A condition of the final `and` dropped, or one added.
        if op == "and":
            for j, arg in enumerate(args):
                new = (name, op, args[:j] + args[j + 1:], params)
                add(i, before + [new] + after, _line(new), f"{WORDS.get(arg, arg)} {_were(arg)} left out", f"drop:{arg}")
            for cond in ADDED_CONDITIONS:
                extra = (cond, cond, ("a",), {})
                new = (name, op, args + (cond,), params)
                add(i, before + [extra, new] + after, f"{_line(stage)} and {OPS[cond][1].format('a')}",
                    f"an extra condition ({OPS[cond][1].format('a')}) was added", f"add:{cond}")
        # One operand changed on its way in (squared, its absolute value, transposed, negated, doubled;
        # a size off by one, `√(d_k - 1)`, a count taken from one or to one past the end).
        if op not in ("and", "guard", "head", "intervention", "facts") or (exercise and op in ("head", "interv4")):
            for j, arg in enumerate(args):
                if kinds.get(arg) == "int" and name != "return":
                    changes = SIZE_CHANGES
                elif kinds.get(arg) == "array":
                    # the weights' softmax taken again where they are used (returned, or mixed)
                    changes = OPERAND_CHANGES + (OPERAND_CHANGES_EX if exercise else ()) + (
                        ("softmax_",) if arg == "a" else ())
                else:
                    continue
                for change in changes:
                    inner = (f"{arg}'", change, (arg,), {})
                    new = (name, op, args[:j] + (f"{arg}'",) + args[j + 1:], params)
                    shown = OPS[change][1].format(arg)
                    why = f"{WORDS.get(arg, arg)} went in as `{shown}`"
                    if change == "row":  # an extra leading axis of length 1 says nothing of which array had it
                        why += " (or another array of that line was kept as a [1, n] row)"
                    add(i, before + [inner, new] + after, _line(new).replace(f"{arg}'", f"({shown})"),
                        why, f"operand:{arg}:{change}")
                    twin = arg[:-2] + "_a" if arg.endswith("_b") else None
                    if name == "return" and twin in args:
                        # the same change to its twin from the second run
                        k = args.index(twin)
                        inner2 = (f"{twin}'", change, (twin,), {})
                        both = tuple(f"{a}'" if m in (j, k) else a for m, a in enumerate(args))
                        new = (name, op, both, params)
                        shown2 = OPS[change][1].format(twin)
                        add(i, before + [inner, inner2, new] + after,
                            _line(new).replace(f"{arg}'", f"({shown})").replace(f"{twin}'", f"({shown2})"),
                            f"{WORDS.get(arg, arg)} and {WORDS.get(twin, twin)} went in as `{shown}` and `{shown2}`",
                            f"operand:{arg}+{twin}:{change}")
                if kinds.get(arg) != "array":
                    continue
                if exercise and (op == "head" or name == "return"):
                    # another value in scope added to it, or taken from it
                    for other in scope:
                        if other == arg or kinds.get(other) != "array":
                            continue
                        for change, sign in (("add", "+"), ("sub", "-")):
                            inner = (f"{arg}'", change, (arg, other), {})
                            new = (name, op, args[:j] + (f"{arg}'",) + args[j + 1:], params)
                            shown = f"{arg} {sign} {other}"
                            add(i, before + [inner, new] + after, _line(new).replace(f"{arg}'", f"({shown})"),
                                f"{WORDS.get(arg, arg)} went in as `{shown}`", f"operand:{arg}:{change}:{other}")
                if name == "return":
                    for n in ROUNDINGS:
                        inner = (f"{arg}'", "round", (arg,), {"n": n})
                        new = (name, op, args[:j] + (f"{arg}'",) + args[j + 1:], params)
                        add(i, before + [inner, new] + after,
                            _line(new).replace(f"{arg}'", f"np.round({arg}, {n})"),
                            f"{WORDS.get(arg, arg)} {'were' if arg in ('q', 'k', 'v') else 'was'} rounded to {n} "
                            f"decimals", f"round:{arg}:{n}")
        if op == "guard":
            add(i, before + after, "(no 2-D test)", "the 2-D test was left out", "drop")
        if exercise and op == "const" and isinstance(params.get("value"), int):
            for value in (0, 1, 2, -1, -2):
                if value != params["value"]:
                    new = (name, op, args, {**params, "value": value})
                    counted = name == "softmax_axis" and value == 2  # the keys' axis, counted from 1
                    add(i, before + [new] + after, _line(new), f"{WORDS.get(name, name)} became {value}",
                        f"value:{value}", look=(
                            "numpy counts axes from 0: a [T, T] score matrix has axes 0 and 1, and the keys run "
                            "along axis 1 (or -1, the last). Axis 2 is theirs only when axes are counted from 1, "
                            "as MATLAB, R and Julia count them.") if counted else "")
        if exercise and name == "return" and op == "interv4":
            new = (name, "values4", args, params)
            add(i, before + [new] + after, _line(new), "a tuple of the values was returned in place of the dict",
                "op:interv4->values4")
        if name == "return" or op in ("guard", "and", "facts", "tuple", "one", "const"):
            continue
        # An operator swapped or inverted.
        for alt in SWAPS.get(op, ()):
            new = (name, alt, args, params)
            add(i, before + [new] + after, _line(new), f"{OP_WORDS.get(op, op)} became {OP_WORDS.get(alt, alt)}",
                f"op:{op}->{alt}")
            if exercise and alt in NUMPY_PHRASED and "tol" in params:
                loose = (name, alt, args, {**params, "tol": 1e-8, "rtol": 1e-5})
                add(i, before + [loose] + after, f"{name} = {NUMPY_PHRASED[alt].format(*args)}",
                    f"{OP_WORDS.get(op, op)} became {OP_WORDS.get(alt, alt)}, within numpy's default tolerance",
                    f"op:{op}->{alt}:np")
            if exercise and alt == "ndim_at_least_2":
                # stacks let through, and the row sums taken over the last axis
                program = [(n, o, a, {**p, "axis": -1}) if p.get("axis") == 1 else (n, o, a, p)
                           for n, o, a, p in before + [new] + after]
                add(i, program, f"{_line(new)}, with axis=-1 for axis=1",
                    "the 2-D test was loosened to ndim >= 2 and the row sums taken over the last axis",
                    f"op:{op}->{alt}:last_axis")
        if exercise and op == "matmul" and kinds.get("rows") == "rows":
            new = (name, "selmix", args + ("rows",), params)
            add(i, before + [new] + after, _line(new), "only the listed rows were mixed, the other rows' "
                "contributions left out", "op:matmul->selmix", restrict=False)  # rows=None: the reference's
        if exercise and op == "avg":
            # a mean written as a total over the wrong count
            for other in scope:
                if kinds.get(other) == "int":
                    new = (name, "sum_by", args + (other,), params)
                    add(i, before + [new] + after, _line(new), f"the mean was taken as a sum divided by "
                        f"{WORDS.get(other, other)}", f"op:avg->sum_by:{other}")
        if "axis" in params:
            for axis in AXES + ((LAST_TWO,) if op in REDUCTIONS else ()):
                if axis != params["axis"]:
                    new = (name, op, args, {**params, "axis": axis})
                    over = ("the whole array" if axis is None else "the last two axes at once (each matrix whole)"
                            if axis == LAST_TWO else f"axis {axis}")
                    add(i, before + [new] + after, _line(new), f"the {_reduction(op)} ran over {over}",
                        f"axis:{params['axis']}->{axis}")
        if "tol" in params:
            for tol in TOLERANCES:
                new = (name, op, args, {**params, "tol": tol})
                add(i, before + [new] + after, _line(new), f"the tolerance became {tol:g}", f"tol:{tol:g}")
            if exercise:
                for n in ROUNDINGS_COMPARED:
                    new = (name, "close_round", args, {"n": n})
                    add(i, before + [new] + after, _line(new),
                        f"{WORDS.get(args[0], args[0])} {_were(args[0])} rounded to {n} decimals and compared with 1 "
                        f"(a tolerance of about {0.5 * 10.0 ** -n:g})", f"round:{n}")
        if kinds.get(name) not in ("array", "scalar"):
            continue
        # A stage skipped: its first operand passed on as it is.
        if args and kinds.get(args[0]) == kinds.get(name):
            new = (name, "same", args[:1], {})
            add(i, before + [new] + after, f"{name} = {args[0]}", f"the step `{_line(stage)}` was left out", "skip")
        if exercise:
            # ... or another of its operands
            for arg in args[1:]:
                if kinds.get(arg) == kinds.get(name) and arg != args[0]:
                    new = (name, "same", (arg,), {})
                    add(i, before + [new] + after, f"{name} = {arg}",
                        f"the step `{_line(stage)}` was left out, {WORDS.get(arg, arg)} passed on in its place",
                        f"skip:{arg}")
        # A mixture divided by a count once more: a product, already a weighted mean, over the
        # length of an argument (`v.sum(axis=0) / len(v)` kept when the sum became `weights @ v`).
        if exercise and op == "matmul":
            for source in dict.fromkeys(n for n, kind in inputs if kind == "array"):
                first = (name + "'", op, args, params)
                count = (name + "_n", "firstdim", (source,), {})
                new = (name, "div", (name + "'", name + "_n"), {})
                add(i, before + [first, count, new] + after, f"{_line(stage)} / len({source})",
                    f"{WORDS.get(name, name)} {_were(name)} divided by the length of {WORDS.get(source, source)} "
                    f"as well", f"insert:per_len:{source}")
        # A stage done twice.
        if op in ("T", "sqrt", "exp", "div", "sub", "abs") or (op == "matmul" and name == "o"):
            twice = (name + "'", op, args, params)
            # a product applied twice mixes its result again; anything else acts on its own output
            again = (name, op, (args[0], name + "'") if op == "matmul" else (name + "'",) + args[1:], params)
            add(i, before + [twice, again] + after, f"{_line(stage)}, twice",
                f"the step `{_line(stage)}` was applied twice", "twice")
        # A common extra stage after it.
        for extra in INSERTS + (INSERTS_EX if exercise else ()):
            if extra == "per_sqrt_col" and name not in ("q", "k"):
                continue  # the scaling done early, on the queries or keys as they are projected
            if extra in MASKS and name not in ("d", "s"):
                continue  # a causal mask, put on the scores
            if extra == "residual":
                sources = [a for a in args if kinds.get(a) == "array"] + [n for n, kind in inputs if kind == "array"]
                for source in dict.fromkeys(sources):
                    first = (name + "'", op, args, params)
                    new = (name, "residual", (name + "'", source), {})
                    add(i, before + [first, new] + after, f"{_line(stage)} + {source}",
                        f"{WORDS.get(source, source)} {_were(source)} added back to {WORDS.get(name, name)}",
                        f"insert:residual:{source}")
                    # ... only where the shapes agree: a residual connection behind `if o.shape == x.shape`
                    new = (name, "residual_if", (name + "'", source), {})
                    add(i, before + [first, new] + after, f"{_line(stage)} + {source}, where their shapes agree",
                        f"{WORDS.get(source, source)} {_were(source)} added back to {WORDS.get(name, name)} wherever "
                        f"the two have the same shape (a skip connection)", f"insert:residual_if:{source}")
                continue
            for n in ROUNDINGS if extra == "round" else (0,):
                first = (name + "'", op, args, params)
                new = (name, extra, (name + "'",), {"n": n})
                shown = OPS[extra][1].format(f"({_line(stage).split(' = ', 1)[1]})", n=n)
                add(i, before + [first, new] + after, f"{name} = {shown}",
                    f"an extra `{OPS[extra][1].format(name, n=n)}` was applied to {WORDS.get(name, name)}",
                    f"insert:{extra}" + (f":{n}" if extra == "round" else ""))
    _more_edits(fn, inputs, stages, kinds, add)
    return found


_PLURAL = {"q", "k", "v", "k_t", "d", "s", "m", "shifted", "e", "z", "a", "v_new", "sums", "rows", "v_a"}


def _were(name: str) -> str:
    return "were" if name in _PLURAL else "was"


def _it(name: str) -> str:
    return "they are" if name in _PLURAL else "it is"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _inline(name: str, chain: dict) -> str:
    """A value of the chain written out as one expression of the names outside it."""
    if name not in chain:
        return name
    _, op, args, params = chain[name]
    shown = [_inline(a, chain) for a in args]
    shown = [f"({text})" if " " in text and a in chain else text for a, text in zip(args, shown)]
    return OPS[op][1].format(*shown, **{k: ("None" if v is None else v) for k, v in params.items()})


_INPUT_LOOKS = {
    "skip_first": "The first row is never looked at: a loop over the rows that starts at 1 (`range(1, len(a))`, a "
                  "habit of counting from 1) skips it. Python counts from 0: `range(len(a))` visits every row.",
    "skip_last": "The last row is never looked at: a loop over the rows that stops one short (`range(len(a) - 1)`, "
                 "or a slice `[:-1]`) skips it. `range(len(a))` visits every row, the last included.",
    "nan_to_num": "`np.nan_to_num` turns NaN into 0, yet a matrix holding NaN is no valid weights, whatever its "
                  "other numbers sum to: test the numbers as they came (NaN fails every comparison).",
}


def _more_edits(fn: str, inputs, stages, kinds, add) -> None:
    """Edits beyond the single-line ones of `_edits`: the arguments changed as the function starts,
    one change made the same way to parallel lines, a group of lines run twice, a step left out for
    one use of its value only, an operation moved outside another, and relatives of an operator."""
    names = [n for n, _ in inputs]
    produced = {stage[0]: i for i, stage in enumerate(stages)}
    used = {a for stage in stages for a in stage[2]}
    arrays = [n for n, kind in inputs if kind == "array" and n in used]
    section = SECTIONS.get(stages[0][0], "§15.4")
    # The arguments changed as the function starts: each array argument alone, then all of them.
    for change in INPUT_CHANGES + (INPUT_CHANGES_EX if fn in EXERCISES else ()):
        groups = [[n] for n in arrays] + ([arrays] if len(arrays) > 1 else [])
        for group in groups:
            inserted = [(n, change, (n,), {}) for n in group]
            lines = "; ".join(f"{n} = {OPS[change][1].format(n)}" for n in group)
            shown = _and([f"`{OPS[change][1].format(n)}`" for n in group])
            add(0, inserted + list(stages), lines,
                f"{_and([WORDS.get(n, n) for n in group])} went in as {shown}",
                f"input:{'all' if len(group) > 1 else group[0]}:{change}", old="",
                what=f"your `{fn}` gives what the reference gives with `{lines}` before its first line: "
                     f"as if {_and([WORDS.get(n, n) for n in group])} went in as {shown}.",
                look=_INPUT_LOOKS[change] if change in _INPUT_LOOKS else
                     f"Find where `{fn}` changes {'its arguments' if len(group) > 1 else f'`{group[0]}`'} "
                     f"before using {'them' if len(group) > 1 else 'it'}.",
                stage_name="inputs" if len(group) > 1 else group[0])
    for i, stage in enumerate(stages):
        name, op, args, params = stage
        before, after = list(stages[:i]), list(stages[i + 1:])
        if op in ("and", "guard", "head", "intervention", "facts", "const"):
            continue
        # One operand changed on its way in, in ways beyond OPERAND_CHANGES.
        for j, arg in enumerate(args):
            if kinds.get(arg) != "array" or (arg in produced and stages[produced[arg]][1] in REDUCTIONS):
                continue  # a row's maximum or total is no matrix of rows to normalize or make one-hot
            for change in MORE_OPERAND_CHANGES:
                inner = (f"{arg}'", change, (arg,), {})
                new = (name, op, args[:j] + (f"{arg}'",) + args[j + 1:], params)
                shown = OPS[change][1].format(arg)
                add(i, before + [inner, new] + after, _line(new).replace(f"{arg}'", f"({shown})"),
                    f"{WORDS.get(arg, arg)} went in as `{shown}`", f"operand:{arg}:{change}")
        if name == "return":
            outs = [a for a in args if kinds.get(a) == "array"]
            if op == "tuple" and len(outs) > 1:
                # Every returned array changed the same way: the column-vector convention, say.
                for change in ("T", "f32", "squeeze", "trunc"):
                    inner = [(f"{a}'", change, (a,), {}) for a in outs]
                    new = (name, op, tuple(f"{a}'" if a in outs else a for a in args), params)
                    line = _line(new)
                    for a in outs:
                        line = line.replace(f"{a}'", OPS[change][1].format(a))
                    add(i, before + inner + [new] + after, line,
                        f"every array it returns was returned as `{OPS[change][1].format('·')}`", f"all:{change}")
                # A part left out of the tuple, or another array of the function put in.
                for a in outs:
                    new = (name, op, tuple(b for b in args if b != a), params)
                    add(i, before + [new] + after, _line(new), f"{WORDS.get(a, a)} {_were(a)} left out of the tuple",
                        f"drop:{a}")
                scope = [n for n, kind in inputs if kind == "array"] + [s[0] for s in stages[:i]]
                for extra in dict.fromkeys(n for n in scope if kinds.get(n) == "array" and n not in args):
                    new = (name, op, args + (extra,), params)
                    add(i, before + [new] + after, _line(new),
                        f"{WORDS.get(extra, extra)} {_were(extra)} returned as well", f"extra:{extra}")
                # One part returned alone, not the tuple.
                for a in outs:
                    new = (name, "one", (a,), {})
                    add(i, before + [new] + after, _line(new),
                        f"only {WORDS.get(a, a)} {_were(a)} returned, not the tuple", f"only:{a}")
                # The parts returned stacked into one array, not as a tuple.
                new = (name, "stack", args, params)
                add(i, before + [new] + after, _line(new), "the parts were stacked into one array, not returned "
                    "as a tuple", "stack")
            continue
        # A size passed in (d_k) read off an array instead: its last axis, or its first.
        for j, arg in enumerate(args):
            if arg not in names or kinds.get(arg) != "int":
                continue
            for source in arrays:
                for size in ("lastdim", "firstdim"):
                    inner = (f"{arg}'", size, (source,), {})
                    new = (name, op, args[:j] + (f"{arg}'",) + args[j + 1:], params)
                    shown = OPS[size][1].format(source)
                    add(i, before + [inner, new] + after, _line(new).replace(f"{arg}'", shown),
                        f"{WORDS.get(arg, arg)} {_were(arg)} read as `{shown}` instead of taken as given",
                        f"size:{arg}:{source}:{size}")
        if kinds.get(name) not in ("array", "scalar"):
            continue
        # a cast, a normalization, a logarithm or a running total after the line
        for extra in MORE_INSERTS + ((ARRAY_INSERTS + ROWS_INSERTS.get(fn, ())) if kinds.get(name) == "array" else ()):
            first = (name + "'", op, args, params)
            new = (name, extra, (name + "'",), {})
            shown = OPS[extra][1].format(f"({_line(stage).split(' = ', 1)[1]})")
            add(i, before + [first, new] + after, f"{name} = {shown}",
                f"an extra `{OPS[extra][1].format(name)}` was applied to {WORDS.get(name, name)}", f"insert:{extra}")
        # an accumulator of the reduction started from another value: a loop's `total = 1`, `m = 0`
        for extra, (reduction, start) in STARTED_FROM.items():
            if op != reduction:
                continue
            first = (name + "'", op, args, params)
            new = (name, extra, (name + "'",), {})
            shown = OPS[extra][1].format(f"({_line(stage).split(' = ', 1)[1]})")
            add(i, before + [first, new] + after, f"{name} = {shown}",
                f"{WORDS.get(name, name)} {_were(name)} accumulated from {start} rather than from "
                f"{'the first term' if reduction != 'sum' else '0'}, as a loop does that starts its "
                f"{'total' if reduction == 'sum' else 'running ' + reduction} at {start}", f"insert:{extra}")
        for alt in MORE_SWAPS.get(op, ()) + (STAGE_SWAPS.get(name, ()) if op == "matmul" else ()):
            new = (name, alt, args, params)
            add(i, before + [new] + after, _line(new), f"{OP_WORDS.get(op, op)} became `{OPS[alt][1].format(*args)}`",
                f"op:{op}->{alt}")
        if op == "matmul" and name != "o_old":
            new = (name, "lastterm", args, params)
            add(i, before + [new] + after, _line(new),
                f"the sum inside `{_line(stage)}` kept only its last term, as a loop does that assigns "
                f"(`=`) where it should add (`+=`)", "op:matmul->lastterm",
                look=f"Find the loop (or the line) of `{fn}` that computes {WORDS.get(name, name)}, and check that "
                     f"it adds every term rather than overwriting the last.")
            for short, which, loop in (("droplast", "last", "range(n - 1)"), ("dropfirst", "first", "range(1, n)")):
                new = (name, short, args, params)
                add(i, before + [new] + after, _line(new),
                    f"the sum inside `{_line(stage)}` left out its {which} term, as a loop over `{loop}` does "
                    f"where it should run over all n terms (`range(n)`)", f"op:matmul->{short}",
                    look=f"Find the loop (or the slice) of `{fn}` that computes {WORDS.get(name, name)}, and check "
                         f"that it runs over every term, the {which} included.")
        if name == "a" and op == "div" and stages[i - 1][0] == "z":  # the softmax's last line: each number alone
            source = next((stage[2][0] for stage in stages if stage[0] == "m"), "s")
            new = (name, "per_entry", (source,), {})
            add(i, before + [new] + after, f"a = np.vectorize(softmax)({source})",
                f"the softmax was taken of each number alone, as `np.vectorize` calls a function with no `signature`: "
                f"each weight is then exp(x - x) / exp(x - x), which is 1", "op:div->per_entry",
                look="`np.vectorize(f)` hands `f` one number at a time. Give it `signature='(n)->(n)'` so that `f` gets "
                     "a whole row, or compute the softmax of every row at once with `axis=-1` and `keepdims=True`.")
        if name in ("d", "s") and kinds.get(name) == "array":  # the scores, before the softmax
            first = (name + "'", op, args, params)
            scores, its = WORDS.get(name, name), "their" if name in _PLURAL else "its"
            for extra, words, look in (
                    ("nodiag", f"the diagonal of {scores} was masked with -∞, so that no position attends to itself",
                     f"Find where `{fn}` masks {scores}: self-attention lets each position attend to every key, "
                     f"its own included."),
                    ("sym", f"{scores} {_were(name)} averaged with {its} transpose, as if query i and key j had to "
                            f"score each other alike",
                     f"Find where `{fn}` computes {scores}: score i, j is query i's dot product with key j, and need "
                     f"not equal score j, i."),
                    *((f"mirror_{half}", f"only the {half} triangle of {scores} was computed and mirrored into the "
                                         f"other, as if {'they were' if name in _PLURAL else 'it was'} symmetric",
                       f"Find where `{fn}` computes {scores}: score i, j is query i's dot product with key j, and need "
                       f"not equal score j, i; compute every entry.") for half in ("lower", "upper")),
                    *((f"tri{half[0]}", f"only the {half} triangle of {scores} was computed, the entries "
                                        f"{'above' if half == 'lower' else 'below'} the diagonal left at 0, as a loop "
                                        f"over the keys j {'<=' if half == 'lower' else '>='} i (or `np.tri{half[0]}`) "
                                        f"leaves them",
                       f"Find where `{fn}` computes {scores}: every query is compared with every key, those "
                       f"{'after' if half == 'lower' else 'before'} it too; self-attention as the chapter builds it "
                       f"masks nothing.") for half in ("lower", "upper"))):
                add(i, before + [first, (name, extra, (name + "'",), {})] + after,
                    f"{name} = {OPS[extra][1].format('(' + _line(stage).split(' = ', 1)[1] + ')')}",
                    words, f"insert:{extra}", look=look)
        if op == "div" and kinds.get(args[1]) == "scalar" and kinds.get(args[0]) == "array":
            # the division done at a later line instead: the output divided, not the scores
            for t in range(i + 1, len(stages)):
                target = stages[t]
                if target[0] == "return" or kinds.get(target[0]) != "array":
                    continue
                skipped = (name, "same", args[:1], {})
                first = (target[0] + "'",) + target[1:]
                moved = (target[0], "div", (target[0] + "'", args[1]), {})
                program = before + [skipped] + list(stages[i + 1:t]) + [first, moved] + list(stages[t + 1:])
                body = _line(target).split(" = ", 1)[1]
                add(t, program, f"{name} = {args[0]}; {target[0]} = ({body}) / {args[1]}",
                    f"the division by {WORDS.get(args[1], args[1])} was applied to {WORDS.get(target[0], target[0])} "
                    f"instead of to {WORDS.get(args[0], args[0])}", f"moved:{name}",
                    old=f"{_line(stage)}; {_line(target)}",
                    look=f"Find where `{fn}` divides by {WORDS.get(args[1], args[1])}: it belongs on "
                         f"{WORDS.get(args[0], args[0])} (`{_line(stage)}`), before anything else uses them.")
        if op == "sub":  # an overflow guard written as a clip, in place of the shift
            for c in CLIP_BOUNDS:
                new = (name, "clipc", args[:1], {"c": c})
                add(i, before + [new] + after, _line(new),
                    f"{WORDS.get(args[0], args[0])} were clipped at a fixed bound instead of shifted by "
                    f"{WORDS.get(args[1], args[1])} (±{c} gives these numbers; other bounds may too)",
                    f"op:sub->clip:{c}")
        if op in REDUCTIONS and params.get("axis") == -1:
            for alt, how in (("red_idx", "`[:, None]`"), ("red_col", "`.reshape(-1, 1)`")):
                new = (name, alt, args, {"red": REDUCTIONS[op], "axis": -1})
                add(i, before + [new] + after, _line(new),
                    f"the {_reduction(op)} dropped its reduced axis and got it back with {how}, which puts it in the "
                    f"right place only for a 2-D array", f"keepdims:{alt}")
        producer = {a: stages[produced[a]] for a in args if a in produced and produced[a] < i}
        if op == "div" and args[0] in producer and producer[args[0]][1] == "exp":
            # The quotient taken in log space: the log of the weights returned.
            y = producer[args[0]][2][0]
            new = (name, "logratio", (y, args[1]), {})
            add(i, before + [new] + after, _line(new),
                f"the logarithm of {WORDS.get(name, name)} was computed (`{y} - np.log({args[1]})`), "
                f"not {WORDS.get(name, name)} themselves", "log_space")
        if op == "div":
            # The quotient taken through logarithms: right where both are positive, NaN where one is not.
            new = (name, "logdiv", args, {})
            add(i, before + [new] + after, _line(new),
                f"the division was done through logarithms, which gives NaN wherever "
                f"{WORDS.get(args[0], args[0])} or {WORDS.get(args[1], args[1])} is negative", "log_div")
        if op == "div" and args[1] in producer and producer[args[1]][1] == "sqrt":
            b = producer[args[1]][2][0]
            new = (name, "precedence", (args[0], b), {})
            add(i, before + [new] + after, _line(new),
                f"Python reads `{args[0]} / {b} ** 1 / 2` as `({args[0]} / {b}) / 2`", "precedence")
        if op in ("div", "mul", "matmul"):
            for j, arg in enumerate(args):
                outer = producer.get(arg)
                if outer is None or outer[1] not in OUTWARD or len(outer[2]) != 1:
                    continue
                inner = (name + "'", op, args[:j] + outer[2] + args[j + 1:], params)
                new = (name, outer[1], (name + "'",), {})
                body = _line(inner).split(" = ", 1)[1]
                add(i, before + [inner, new] + after, f"{name} = {OPS[outer[1]][1].format('(' + body + ')')}",
                    f"`{OPS[outer[1]][1].format('·')}` was applied to `{body}`, not to {WORDS.get(outer[2][0], outer[2][0])}",
                    f"outward:{outer[1]}")
    _partial_skips(fn, stages, kinds, add)
    _blocks_twice(fn, stages, kinds, add)
    _parallel(fn, stages, kinds, add)


def _depends(stages) -> dict[str, set]:
    deps: dict[str, set] = {}
    for name, _, args, _ in stages:
        deps[name] = set(args).union(*(deps.get(a, set()) for a in args))
    return deps


def _partial_skips(fn, stages, kinds, add) -> None:
    """A stage left out where one later line uses its value, kept everywhere else."""
    deps = _depends(stages)
    index = {stage[0]: i for i, stage in enumerate(stages)}
    for i, (skipped, op, args, _) in enumerate(stages):
        if skipped == "return" or not args or kinds.get(skipped) != "array" or kinds.get(args[0]) != "array" \
                or op in ("same", "T"):
            continue
        for j in range(i + 2, len(stages)):
            name, jop, jargs, jparams = stages[j]
            if name == "return" and jop != "tuple":
                continue  # a tuple returned: one of its parts may be the value computed without the step
            for p, n in enumerate(jargs):
                if n not in index or not (i < index[n] < j) or skipped not in deps[n]:
                    continue
                chain = [c for c in range(i, index[n] + 1)
                         if c == i or (skipped in deps[stages[c][0]] and (stages[c][0] in deps[n] or c == index[n]))]
                renamed = {stages[c][0]: stages[c][0] + "~" for c in chain}
                copies = [(skipped + "~", "same", args[:1], {})]
                for c in chain[1:]:
                    cn, cop, cargs, cparams = stages[c]
                    copies.append((cn + "~", cop, tuple(renamed.get(a, a) for a in cargs), cparams))
                new = (name, jop, jargs[:p] + (n + "~",) + jargs[p + 1:], jparams)
                shown = _inline(n + "~", {s[0]: s for s in copies[1:]}).replace(skipped + "~", args[0])
                line = _line(new).replace(n + "~", f"({shown})" if " " in shown else shown)
                why = (f"{WORDS.get(n, n)} {'returned' if name == 'return' else 'used here'} {_were(n)} computed "
                       f"without the step `{_line(stages[i])}`, which the other lines keep")
                what = "" if name != "return" else (
                    f"your `{fn}` returns {WORDS.get(n, n)} as the reference computes them from "
                    f"{WORDS.get(args[0], args[0])} in place of {WORDS.get(skipped, skipped)}, and the rest as the "
                    f"reference does: as if {why}.")
                look = "" if name != "return" else (
                    f"Find where `{fn}` computes the {WORDS.get(n, n).removeprefix('the ')} it returns: they must "
                    f"come from {WORDS.get(skipped, skipped)} (`{_line(stages[i])}`), as everything else does.")
                add(j, list(stages[:j]) + copies + [new] + list(stages[j + 1:]), line, why,
                    f"partial_skip:{skipped}:{n}", what=what, look=look)


def _blocks_twice(fn, stages, kinds, add) -> None:
    """A run of lines that turns one array into another, run a second time on its own result
    (the softmax applied twice)."""
    produced = {stage[0]: i for i, stage in enumerate(stages)}
    for j, (out, op, _, _) in enumerate(stages):
        if out == "return" or kinds.get(out) != "array":
            continue
        for i in range(j - 1):  # the longest run first; at least three lines
            block = stages[i:j + 1]
            inside = {s[0] for s in block}
            outside = {a for s in block for a in s[2] if a not in inside}
            if [a for a in outside if kinds.get(a) == "array"] != [a for a in outside if a not in produced or
                                                                    produced[a] < i] or \
                    len([a for a in outside if kinds.get(a) == "array"]) != 1:
                continue
            (source,) = [a for a in outside if kinds.get(a) == "array"]
            if any(a in inside for s in stages[j + 1:] for a in s[2] if a != out):
                continue  # a later line reads a value inside the run: not a run of its own
            renamed = {s[0]: s[0] + "²" for s in block[:-1]}
            renamed[source] = out
            copies = [(s[0] + "²" if s[0] != out else out, s[1], tuple(renamed.get(a, a) for a in s[2]), s[3])
                      for s in block]
            program = list(stages[:j + 1]) + copies + list(stages[j + 1:])
            first, last = _line(block[0]), _line(block[-1])
            why = (f"the lines from `{first}` to `{last}` were run a second time, on {WORDS.get(out, out)} in "
                   f"place of {WORDS.get(source, source)}")
            add(j, program, f"{last}, then the lines from `{first}` again on {out}", why, "block_twice",
                what=f"your `{fn}` gives what the reference gives when the lines from `{first}` to `{last}` are "
                     f"run a second time, on {WORDS.get(out, out)} in place of {WORDS.get(source, source)}.",
                look=f"Find where `{fn}` computes {WORDS.get(out, out)}, and count how often it does.")
            break


def _parallel(fn, stages, kinds, add) -> None:
    """Parallel lines (`q = x @ w_q`, `k = x @ w_k`, `v = x @ w_v`) changed the same way at once."""
    groups: dict[tuple, list[int]] = {}
    for i, (name, op, args, _) in enumerate(stages):
        if name != "return" and len(args) == 2 and kinds.get(name) == "array" and kinds.get(args[1]) == "array":
            groups.setdefault((op, args[0]), []).append(i)
    for (op, _), members in groups.items():
        if len(members) < 2:
            continue
        first = stages[members[0]]
        olds = "; ".join(_line(stages[m]) for m in members)
        operands = [stages[m][2][1] for m in members]

        def program(change):
            out = []
            for i, stage in enumerate(stages):
                if i not in members:
                    out.append(stage)
                    continue
                name, sop, (a, b), params = stage
                if change.startswith("op:"):
                    out.append((name, change[3:], (a, b), params))
                elif change == "twice":
                    out += [(name + "'", sop, (a, b), params), (name, sop, (name + "'", b), params)]
                else:
                    out += [(b + "'", change, (b,), {}), (name, sop, (a, b + "'"), params)]
            return out

        for change in OPERAND_CHANGES + MORE_OPERAND_CHANGES + ("twice",) + tuple(f"op:{alt}" for alt in
                                                                                 SWAPS.get(op, ())):
            if change.startswith("op:"):
                alt = change[3:]
                news = "; ".join(_line((stages[m][0], alt) + stages[m][2:]) for m in members)
                why = f"each {re.sub(r'^an? ', '', OP_WORDS.get(op, op))} became {OP_WORDS.get(alt, alt)}"
            elif change == "twice":
                news = "; ".join(f"{stages[m][0]} = ({_line(stages[m]).split(' = ', 1)[1]}) "
                                 f"{OPS[op][1].format('', stages[m][2][1]).strip()}" for m in members)
                why = f"{_and([WORDS.get(b, b) for b in operands])} were each applied twice"
            else:
                news = "; ".join(_line((stages[m][0], op, (stages[m][2][0], "§"), stages[m][3])).replace(
                    "§", f"({OPS[change][1].format(stages[m][2][1])})") for m in members)
                why = (f"{_and([WORDS.get(b, b) for b in operands])} went in as "
                       f"{_and([f'`{OPS[change][1].format(b)}`' for b in operands])}")
            add(members[0], program(change), news, why, f"each:{change}", old=olds,
                what=f"your `{fn}` gives what the reference gives with `{news}` in place of `{olds}`: as if {why}.",
                look=f"Find the lines of `{fn}` that compute "
                     f"{_and([WORDS.get(stages[m][0], stages[m][0]) for m in members])} and compare them with `{olds}`.")


def _run(fn: str, program: tuple, args: tuple):
    return _finish(fn, _inputs(fn, args), program, args)


def _inputs(fn: str, args: tuple) -> dict:
    """The names a program starts from: its function's arguments."""
    env = dict(zip((name for name, _ in PROGRAMS[fn][0]), args))
    if fn == "is_attention_weights":
        env["a"] = np.asarray(env["a"], dtype=float)
    return env


def _execute(env: dict, stages) -> None:
    for name, op, stage_args, params in stages:
        env[name] = OPS[op][0]([env[a] for a in stage_args], params)


def _finish(fn: str, env: dict, stages, args: tuple):
    """What a program returns once `stages` have run on `env` (the rest of it, or all of it)."""
    try:
        _execute(env, stages)
    except _Stop:
        return False
    except _Reference:  # an edit of the other branch: this call runs as the reference
        return _run(fn, tuple(PROGRAMS[fn][1]), args)
    return env["return"]


def _probes(fn: str) -> tuple[tuple, ...] | None:
    """Three inputs of the chapter's example's shapes, the later two with every number moved."""
    if fn in ("is_attention_weights", "head_facts"):
        return None
    from .cases import example_arrays

    ex = example_arrays()
    by_name = {"x": ex["X"], "w_q": ex["W_Q"], "w_k": ex["W_K"], "w_v": ex["W_V"], "w_v_new": ex["W_V"] - 1.0,
               "q": ex["Q"], "k": ex["K"], "v": ex["V"], "d": ex["D"], "s": ex["S"], "a": ex["A"], "d_k": 2,
               "shift": np.array([2.0, -1.0]), "rows": [0]}
    first = tuple(by_name[name] for name, _ in PROGRAMS[fn][0])
    # (and other rows listed: an edit that moves no row of [0] need not move none of [0, 2])
    others = {"rows": [0, 2]}
    moved = tuple(arg * 1.7 + 0.3 if isinstance(arg, np.ndarray) and name != "a" else
                  (np.roll(arg, 1, axis=-1) if name == "a" else others.get(name, arg))
                  for (name, _), arg in zip(PROGRAMS[fn][0], first))
    # small numbers of both signs: an edit that is constant on the chapter's numbers (a clip to
    # [0, 1] of values above 1) need not be constant on these
    small = tuple(arg * 0.2 - 0.1 if isinstance(arg, np.ndarray) and name != "a" else
                  (np.roll(arg, 2, axis=-1) if name == "a" else arg)
                  for (name, _), arg in zip(PROGRAMS[fn][0], first))
    return first, moved, small


_REFERENCE_ON_PROBES: dict[str, tuple] = {}


def _parts(value) -> list:
    return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, tuple) else [value]


def _same(a, b) -> bool:
    return np.shape(a) == np.shape(b) and np.allclose(a, b, equal_nan=True)


# Operators whose constant value is what the edit describes, not a guess: a softmax of each number
# alone is 1 wherever it is finite, and that is how a student's `np.vectorize` shows.
_CONSTANT_BY_NATURE = {"per_entry"}


def _ignores_inputs(fn: str, program: tuple, probes) -> bool:
    """Does the edited program give the same value whatever its inputs (`s - s`, say)? Such an edit
    describes no computation, only a constant: a guess, which it must not explain away."""
    try:
        with np.errstate(all="ignore"):
            values = [_parts(_run(fn, program, args)) for args in probes]
            if fn not in _REFERENCE_ON_PROBES:  # the same for every edit of fn
                _REFERENCE_ON_PROBES[fn] = [_parts(_run(fn, tuple(PROGRAMS[fn][1]), args)) for args in probes]
            refs = _REFERENCE_ON_PROBES[fn]
    except Exception:
        return False
    # a part that stays put although the reference's moves (the reference's own zero-query weights never do)
    return any(all(_same(value[n], values[0][n]) for value in values[1:])
               and not all(_same(ref[n], refs[0][n]) for ref in refs[1:])
               for n in range(min(len(values[0]), len(refs[0]))))


@lru_cache(maxsize=None)
def _table(fn: str) -> dict[str, Edit]:
    if fn not in PROGRAMS:
        return {}
    edits = list(_edits(fn))
    stored = _stored(fn)
    if stored is not None:
        return {edits[index].code: edits[index] for index in stored["kept"]}
    return {edits[index].code: edits[index] for index in _kept(fn, edits)}


def _kept(fn: str, edits: list) -> list[int]:
    """Which of `edits` the table holds, by position: the first edit of each code that does not
    give one constant value whatever its inputs."""
    probes = _probes(fn)
    codes, kept = set(), []
    for index, edit in enumerate(edits):
        if edit.code not in codes and not (probes and not _CONSTANT_BY_NATURE & {stage[1] for stage in edit.program}
                                           and _ignores_inputs(fn, edit.program, probes)):
            codes.add(edit.code)
            kept.append(index)
    return kept


# Screening every edit on the probes (`_kept`) and grouping the composable ones (`_pairable`) is
# the same work in every grading run: a second of CPU, more than grading a class of fifty takes.
# It depends on nothing but this file, the reference and the chapter's example (and numpy), so it is
# stored, computed once, in data/derived-edits.json under a digest of those files; a file that
# does not match is ignored and the work done afresh (the test also recomputes it under the numpy
# installed). Write it again after changing this file: `python -m autograder.derived --write`
# (tests/test_diagnoses.py checks that it equals a fresh computation).
SCREENS = Path(__file__).resolve().parent / "_data" / "derived-edits.json"  # _data: the project's data/


def screens_digest() -> str:
    """Of everything the screening reads: this file, the reference (which the exercises' programs
    call), the cases module and the chapter's data (which make the probes)."""
    from solutions import attention_head as reference

    from . import cases

    digest = hashlib.sha256()
    for path in (Path(__file__), Path(reference.__file__), Path(cases.__file__), cases.DATA):
        digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _screens() -> dict:
    try:
        stored = json.loads(SCREENS.read_text(encoding="utf-8"))
        if stored.get("digest") == screens_digest() and isinstance(stored.get("functions"), dict):
            return stored["functions"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _stored(fn: str) -> dict | None:
    entry = _screens().get(fn)
    return entry if isinstance(entry, dict) and "kept" in entry and "pairable" in entry else None


def compute_screens() -> dict:
    """What data/derived-edits.json holds, computed afresh."""
    functions = {}
    for fn in PROGRAMS:
        edits = list(_edits(fn))
        kept = _kept(fn, edits)
        table = {edits[index].code: edits[index] for index in kept}
        functions[fn] = {"kept": kept, "pairable": sorted(_pairable(fn, _composable(table)))}
    return {"digest": screens_digest(), "functions": functions}


@lru_cache(maxsize=None)
def models(fn: str) -> tuple[tuple[str, Callable], ...]:
    """Every derived edit of `fn`, as (code, model); the model takes the function's arguments."""
    return tuple((code, _model(fn, edit.program)) for code, edit in _table(fn).items())


def _model(fn: str, program: tuple) -> Callable:
    return lambda *args: _run(fn, program, args)


def model(code: str) -> Callable:
    if PAIR in code:
        edit = _pair(code)
        if edit is None:
            raise KeyError(code)
        return _pair_model(code)
    return dict(models(fn_of(code)))[code]


def preference(code: str) -> float:
    """Of edits that give the same values, the one told: an operator, an axis, the row list or an
    operand named outright before an operand changed on its way in, an extra stage or a skip; an
    edit of both branches of `rows is None` before one of a single branch."""
    label = code.split("-", 3)[-1]
    if "-to-clip" in code:  # a bound nothing in the chapter suggests: told only where nothing plainer gives the values
        rank = 3.5
    elif any(f"-insert-{extra}" in code for extra in STARTED_FROM):  # a loop's accumulator started wrongly
        rank = 0.5
    elif "-op-" in code or "-read-" in code or any(kind in label for kind in ("unpack", "slot", "value-", "nan_blind",
                                                                            "per_row", "narrow", "exchange")) \
            or code.split("-")[2:4] in (["return", "add"], ["return", "drop"]):
        rank = 0.0
    elif "-axis-" in code or ("-operand-" in code and "-to-" in code):
        rank = 1.0
    elif "-operand-" in code or "-insert-" in code or "-skip" in code or "-twice" in code or "-round-" in code:
        rank = 3.0
    else:
        rank = 2.0
    return rank + (0.5 if "-when_" in code else 0.0)


# Two edits of one function, on different stages: tried only when no single edit reproduces the
# student's values (judge.py screens the pairs on one call first). Named by both codes.
PAIR = "-plus-"


@lru_cache(maxsize=None)
def composable(fn: str) -> tuple[tuple[str, Edit], ...]:
    """The edits of `fn` that replace one stage and can be told as one line beside another."""
    if fn not in PROGRAMS:
        return ()
    return _composable(_table(fn))


def _composable(table: dict[str, Edit]) -> tuple[tuple[str, Edit], ...]:
    return tuple((code, edit) for code, edit in table.items() if edit.at >= 0 and (not edit.what or edit.old == ""))


@lru_cache(maxsize=None)
def pairable(fn: str) -> tuple[tuple[str, Edit], ...]:
    """The composable edits, one for each distinct change of a stage: of the edits of one stage that
    give the same values on the probes (`k_t = k`, `k_t = (kᵀ)ᵀ`), the one of fewest lines."""
    if fn not in PROGRAMS:
        return ()
    stored = _stored(fn)
    chosen = set(stored["pairable"]) if stored is not None else _pairable(fn, composable(fn))
    return tuple(item for item in composable(fn) if item[0] in chosen)


def _pairable(fn: str, composable_edits: tuple) -> set[str]:
    """The codes `pairable` keeps of the composable edits."""
    probes = _probes(fn)
    if probes is None:
        return {code for code, _ in composable_edits}
    inputs, stages = PROGRAMS[fn]
    # and numbers in the thousands, where `log(e / z)` and `shifted - log(z)` part ways
    probes = probes + (tuple(arg * 1000.0 if isinstance(arg, np.ndarray) and name != "a" else arg
                             for (name, _), arg in zip(inputs, probes[0])),)
    kept: dict[tuple, tuple[str, Edit]] = {}
    for code, edit in sorted(composable_edits, key=lambda item: len(item[1].rep)):
        # what the changed stage leaves behind for the stages after it, on each probe
        shown = []
        for args in probes:
            env = _inputs(fn, args)
            try:
                with np.errstate(all="ignore"):
                    _execute(env, list(stages[:edit.at]) + list(edit.rep))
                    shown.append([(name, np.round(np.asarray(env[name], dtype=float), 9).tobytes())
                                  for name in dict.fromkeys(stage[0] for stage in edit.rep)
                                  if not any(mark in name for mark in "'~²")])
            except Exception:
                shown = code  # raised where the stage runs: kept apart, as its own change
                break
        kept.setdefault((edit.at, repr(shown)), (code, edit))
    return {code for code, _ in kept.values()}


def pair_code(first: str, second: str) -> str:
    return first + PAIR + second[len(f"derived-{fn_of(second)}-"):]


def pair_parts(code: str) -> tuple[str, str]:
    """The codes of the two edits of a pair's code (`pair_code`'s inverse)."""
    first, _, rest = code.partition(PAIR)
    return first, f"derived-{fn_of(code)}-{rest}"


def pair_program(first: Edit, second: Edit) -> tuple:
    """The reference's stages with two edits of different stages made, `first` the earlier."""
    stages = tuple(PROGRAMS[first.fn][1])
    return stages[:first.at] + first.rep + stages[first.at + 1:second.at] + second.rep + stages[second.at + 1:]


def run(fn: str, program: tuple, args: tuple):
    """What an edited program returns on `args` (or the exception it raises)."""
    return _run(fn, program, args)


def run_pair(fn: str, first: Edit, second: Edit, args: tuple, prefixes: dict):
    """What `pair_program(first, second)` returns on `args`, as `run` would.

    The pairs of one `first` share every stage before `second`'s: those run once, and their
    values wait in `prefixes` (the caller's, emptied whenever another prefix is needed) for the
    next pair of the same `first` and stage. A prefix that stops or raises is not shared: each of
    its pairs then runs whole."""
    stages = PROGRAMS[fn][1]
    known = prefixes.get("prefix")
    if known is None or known[0] is not first or known[1] != second.at or known[2] is not args:
        env = _inputs(fn, args)
        try:
            _execute(env, tuple(stages[:first.at]) + first.rep + tuple(stages[first.at + 1:second.at]))
        except Exception:  # a predicate's early return, another branch, an error: run whole
            env = None
        known = prefixes["prefix"] = (first, second.at, args, env)
    if known[3] is None:
        return _run(fn, pair_program(first, second), args)
    return _finish(fn, dict(known[3]), second.rep + tuple(stages[second.at + 1:]), args)


@lru_cache(maxsize=None)
def _pair(code: str) -> Edit | None:
    fn = fn_of(code)
    first, second = pair_parts(code)
    table = dict(composable(fn))
    one, two = table.get(first), table.get(second)
    if one is None or two is None or not one.at < two.at:
        return None
    program = pair_program(one, two)
    return Edit(fn, code, program, f"{one.old}; {two.old}", f"{one.new}; {two.new}", f"{one.why}; and {two.why}",
                one.section if one.section == two.section else f"{one.section} and {two.section}",
                what=f"your `{fn}` gives what the reference gives with {_phrase(one)}, and with {_phrase(two)}: "
                     f"as if {one.why}; and {two.why}.",
                look=f"Find the two lines of `{fn}` these name, and compare them with the reference's.")


@lru_cache(maxsize=None)
def _pair_model(code: str) -> Callable:
    return _model(fn_of(code), _pair(code).program)


def _phrase(edit: Edit) -> str:
    return f"`{edit.new}` before its first line" if edit.old == "" else f"`{edit.new}` in place of `{edit.old}`"


def fn_of(code: str) -> str:
    return code.split("-")[1]


def is_derived(code: str) -> bool:
    return code.startswith("derived-")


_FUNCTION_WORDS = {"project_qkv": "projections", "scores": "scores", "scale": "scaled scores",
                   "softmax_rows": "weights", "mix": "output", "attention": "attention",
                   "self_attention_head": "head", "zero_query_mixture": "zero-query mixture",
                   "is_attention_weights": "predicate", "shifted_output": "shifted output",
                   "output_change": "output change", "head_facts": "facts"}


def describe(code: str):
    from .diagnoses import Diagnosis

    edit = None if not is_derived(code) else _pair(code) if PAIR in code else _table(fn_of(code)).get(code)
    if edit is None:
        raise KeyError(code)
    what = edit.what or (f"your `{edit.fn}` gives what the reference gives with `{edit.new}` in place of "
                         f"`{edit.old}`{_where(edit)}: as if {edit.why}.")
    stage = stage_of(code)
    if edit.look:
        look = edit.look
    elif stage == "rows" and "-read-" in code:
        look = (f"Find where `{edit.fn}` reads `rows` (a list of indices, possibly empty, or None for every row) "
                f"and use it as given.")
    elif stage == "all" and any(f"-{family}" in code for family in FAMILIES):
        look = f"Compare the tests of `{edit.fn}` with `{edit.old}`."
    else:
        owner = _owner(edit.fn, stage)
        place = f"`{edit.fn}`" if owner is None else f"`{edit.fn}`, or of a function it calls (the chapter's is `{owner}`),"
        look = (f"Find the line of {place} that computes {WORDS.get(stage, 'this value')} and compare it "
                f"with `{edit.old}`.")
    return Diagnosis(code, what, look, edit.section)


@lru_cache(maxsize=None)
def _owner(fn: str, stage: str) -> str | None:
    """The chapter's function, called by the reference's `fn` directly or not, whose own line
    computes `stage` (mix's `o = a @ v`, in the head); None where `fn` computes it itself."""
    import ast
    import inspect

    from solutions import attention_head as reference

    if stage not in _called_stages(fn):
        return None
    todo, seen = [fn], {fn}
    while todo:
        current = todo.pop(0)
        tree = ast.parse(inspect.getsource(getattr(reference, current)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROGRAMS \
                    and node.func.id not in seen:
                callee = node.func.id
                seen.add(callee)
                if stage in {line[0] for line in PROGRAMS[callee][1]} - _called_stages(callee):
                    return callee
                todo.append(callee)
    return None


def _where(edit: Edit) -> str:
    """What the names its stages make that the edit's lines read stand for: the student sees only
    the arguments, so `s = d / r` alone would leave `r` unexplained. The reference's own line where
    it reads nothing but the arguments (`r = √d_k`), its meaning in words where it would bring more
    of the reference's names (`a` is the weights, not `a = e / z`)."""
    inputs, stages = PROGRAMS.get(edit.fn, ((), []))
    arguments = {name for name, _ in inputs}
    made = {stage[0]: _line(stage) for stage in stages if stage[0] != "return"}
    # neither the arguments nor what the edit's own lines make (`r` in `r = d_k²; s = d / r`)
    known = arguments | {line.split(" = ")[0] for line in edit.old.split("; ") if " = " in line}
    read = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", f"{edit.old} {edit.new}")
    said = []
    for name in dict.fromkeys(read):
        if name not in made or name in known:
            continue
        line = made[name]
        if set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", line.split(" = ", 1)[1])) & (set(made) - arguments) \
                and name in WORDS:
            said.append(f"`{name}` is {WORDS[name]}")
        else:
            said.append(f"`{line}`")
    return f" (where {', '.join(said)})" if said else ""


def stage_of(code: str) -> str:
    """The reference's line (the stage it computes) a single edit's code changes."""
    return code.split("-")[2]


_SWAPPED_TO = re.compile(r"-op-[^-]+-to-(.+?)(?:-[\d.]+)?$")


_PARTIAL_SKIP = re.compile(r"-partial_skip-([^-]+)-")


def _form_of(code: str) -> str:
    parts = code.split("-")
    return parts[3] if len(parts) > 3 and parts[3] in FORMS.get(parts[1], {}) else ""


_PER_LEN = "-insert-per_len-"


def same_line_alike(code: str, other: str) -> bool:
    """Do two single edits change one line in ways that, giving the same values, are one mistake
    told alike: the line skipped or its result replaced, one operator with another bound? Not two
    different operators put in the same place (`any` for `all`, and the first row alone). A line
    left out of one path (`partial_skip`) is one mistake wherever along that path it is told, and
    the same as an edit of that line itself where the two give the same values: in the log-sum-exp
    form the shifted scores feed the row totals alone."""
    skipped = [_PARTIAL_SKIP.search(c) for c in (code, other)]
    if any(skipped) and _form_of(code) == _form_of(other):
        lines = [m.group(1) if m else stage_of(c) for m, c in zip(skipped, (code, other))]
        if lines[0] == lines[1]:
            return True
    if stage_of(code) != stage_of(other) or (_PER_LEN in code) != (_PER_LEN in other):
        return False  # (a mixture divided by a count again is its own mistake, whatever else gives its values)
    mine, theirs = _SWAPPED_TO.search(code), _SWAPPED_TO.search(other)
    return not (mine and theirs and mine.group(1) != theirs.group(1))


@lru_cache(maxsize=None)
def _called_stages(fn: str) -> frozenset:
    """The names the reference's `fn` gets by calling another of the chapter's functions: every
    stage of theirs (softmax_rows' m, shifted, e, z and a, in zero_query_mixture)."""
    import ast
    import inspect

    from solutions import attention_head as reference

    tree = ast.parse(inspect.getsource(getattr(reference, fn)))
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROGRAMS}
    found: set = set()
    for callee in called - {fn}:
        found |= {stage[0] for stage in PROGRAMS[callee][1] if stage[0] != "return"} | _called_stages(callee)
    return frozenset(found)


def inside_a_call(code: str) -> bool:
    """Does the edit `code` change a line that the reference's function does not write itself, but
    gets by calling another of the chapter's functions (or every reduction at once)?"""
    fn = fn_of(code)
    own = {stage[0] for stage in PROGRAMS[fn][1]} - _called_stages(fn)
    return any(part.split("-")[0] not in own for part in code[len(f"derived-{fn}-"):].split(PAIR))


assert all(re.fullmatch(r"[a-z_]+", fn) for fn in PROGRAMS)


def main(argv: list[str]) -> int:
    """`--write` data/derived-edits.json afresh; `--check` that it is current (exit status 1 if not)."""
    if argv not in (["--write"], ["--check"]):
        print("usage: python -m autograder.derived --write | --check", file=sys.stderr)
        return 2
    screens = compute_screens()
    # a line for each function: a readable diff when an edit comes or goes
    fresh = "".join(["{\n", f' "digest": {json.dumps(screens["digest"])},\n', ' "functions": {\n',
                     ",\n".join(f"  {json.dumps(fn)}: {json.dumps(entry, sort_keys=True)}"
                                 for fn, entry in sorted(screens["functions"].items())), "\n }\n}\n"])
    if argv == ["--check"]:
        current = SCREENS.exists() and SCREENS.read_text(encoding="utf-8") == fresh
        print(f"{SCREENS.name} is {'current' if current else 'out of date: run python -m autograder.derived --write'}.")
        return 0 if current else 1
    SCREENS.write_text(fresh, encoding="utf-8")
    print(f"wrote {SCREENS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
