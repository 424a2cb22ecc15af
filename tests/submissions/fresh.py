"""Further sets of mistakes written from the chapter and the stubs alone (fresh.json, fresh2.json,
fresh3.json to fresh16.json, fresh18.json to fresh33.json, fresh35.json to fresh37.json, fresh40.json to fresh43.json): name -> the mistake in a line, and the module. Every step and exercise has some; a
few are no numeric slip at all (a wrong return type, a mutated argument, code for 2-D input only,
a special case for T = 1).
Frozen like heldout.json: entries are never edited to suit the grader. They join the tests that
check what is said (the claims test and the self-check's), not the share of mistakes named.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Fresh:
    mistake: str
    source: str

    def text(self) -> str:
        return self.source


def _read(name: str, prefix: str = "") -> dict[str, Fresh]:
    return {prefix + entry["name"]: Fresh(entry["mistake"], entry["source"])
            for entry in json.loads(Path(__file__).with_name(name).read_text())}


# fresh2.json to fresh6.json: five more rounds of 40 or so, written the same way by other hands (the
# third with more code written inline, two slips at once, and the exercises' edge cases; the fourth
# with loops, einsum, and input forms the docstrings allow but the example does not show; the fifth
# with half-remembered formulas, "stable" tricks done wrong, and functions written for one sequence
# only; the sixth with loops one short, in-place writes, float32 casts and five pairs of mistakes;
# the seventh in pure Python, `math`, einsum, tensordot and vectorize, nine of them notebooks whose
# code cells are kept here as one module; the eighth with deep-learning habits: torch's weight
# layout, masks, dropout, layer norm, heads split, and exercises built on another contract function;
# the ninth with state kept between calls, defensive checks that reject valid input, code for the
# example's shapes only, predicates checking part of their input, and exercises answering a
# neighbouring question; the tenth with half-remembered formulas, pieces wired wrongly, numeric
# types, predicates with any() or a shape check alone, and two mistakes in one module; the eleventh
# with the contract misread and numpy's own meanings: np.inner, np.dot and np.tensordot, a d_k read
# off the wrong array, arguments passed in the wrong order, one-based rows, keys misspelled); the
# twelfth with fused projections, cosine scores, softmax shifted by the minimum, rounding to the
# chapter's table, column-form mixing, residuals, and predicates that check only the matrix's total;
# the thirteenth with `np.dot` in mix, a log-softmax, a precedence slip in the divisor, a scipy
# import inside the head, a batch joined with `np.concatenate`, and exercises' related quantities;
# the fourteenth with batches built wrongly, exercise 3's rows slipped, heads that crash or read
# globals, d_k read off the wrong size, and predicates loosened; the fifteenth with copy-paste slips
# in the projections, other similarity measures, other bases and shifts in the softmax, integer
# arithmetic, outputs squeezed for T = 1, and exercises answering with the wrong quantity; the
# sixteenth with identities used half-remembered (polarization, the square root of a ratio, a
# division done through logarithms), a batch stacked or split the wrong way, scores symmetrized,
# loops that index the wrong side, and exercises taking a shortcut that leaves the weights out; the
# eighteenth (the seventeenth is a folder of notebooks, tests/submissions/fresh17/) with operands
# swapped for another array in scope, integer casts, precedence, in-place writes, renormalised
# weights, batch loops one short, predicates loosened or tightened, and rows sliced one short; the
# nineteenth with PyTorch habits (a weight laid out as nn.Linear's, a fused projection split in three,
# a causal mask with the diagonal, half precision), log-sum-exp written wrongly, output arrays made
# in another array's shape and filled in a loop, and exercises answering a neighbouring question; the
# twentieth with other textbooks' scores and softmaxes (additive scores, other bases, a temperature,
# columns normalized after rows), lists and loops, np.matrix, a reshape for a transpose, batches
# left partly unfilled, and exercises answering a neighbouring question; the twenty-first with
# 2-D-only habits on a batch (einsum, np.inner, `.T`, `shape[1]`), a triangle of the scores left at
# zero, an accumulator never reset, sizes taken for one another, batch loops that keep one example,
# and predicates and exercises with a condition added or a quantity swapped; the twenty-second with
# plain-Python loops whose accumulators start wrongly or are shared across rows, indices swapped,
# "careful" numerics done wrong (an epsilon for the shift, a log-softmax, float32), exercises
# answering a neighbouring quantity, and the contract's rows and shapes misread; the twenty-third
# with broadcasting that works only on square inputs, `keepdims` kept in one place and not the
# other, np.tile, np.average and np.linalg.norm where a sum belongs, reshape for a transpose,
# `.squeeze()`, a cache keyed on one argument, a falsy test for `rows is None`, and exercises whose
# answers are assembled wrongly (dict keys, tuple order, which row breaks the counterexample); the
# twenty-fourth with the pieces wired wrongly (a scaled score computed and not used, keys and values
# from one example of a batch, a batch of one unwrapped, defaults shared between calls, an
# intervention's before and after swapped or aliased) and exercises answering a neighbouring quantity;
# the twenty-fifth with structural slips (a diagonal or last column left at zero, a stage applied
# twice, a residual added back, a clip where a shift belongs), numpy misuse on a batch (np.dot,
# np.inner, concatenate for stack), exercises computing a related quantity, and predicates whose
# conditions were swapped or loosened; the twenty-sixth, half of them notebooks (their graded code
# cells kept here as one module, without magics; two whose cells only run as a notebook runs them,
# an error in one cell and the next cells still run, are left out), with a global read for an argument, a cache keyed on the shapes,
# a batch axis added and kept, np.squeeze, einsum with a transposed weight, divisors of a
# neighbouring size, and predicates that test more than the contract asks; the twenty-seventh,
# nearly half of them notebooks (kept the same way; one whose scipy import stops only its own cell
# left out), with loops bounded by the wrong size, a query scaled in the projections, weights
# softmaxed twice, a batch flattened into one sequence, plain-Python softmaxes that work on 2-D
# alone, every array in long double, and exercises missing a sum or answering a neighbour's question;
# the twenty-eighth, from students of other languages and libraries (PyTorch's [out, in] weights,
# MATLAB's column vectors and one-based loops, float32), half-remembered formulas (a softmax in the
# log domain, a temperature), pieces wired in the wrong order, a head that returns its output
# alone, and exercises whose edge cases (no rows, one row, T = 1) are handled wrongly (one notebook
# whose scratch cell raises, so that its cells run as one module stop there, left out); the
# twenty-ninth, nearly half of them notebooks, from students who bring a transformer's habits to
# the chapter's head: causal masks filled with -1e9, residual connections added where the shapes
# allow, dropout, label smoothing, layer norm, torch's transpose(-1, -2), squeezed outputs, float16,
# a head that returns its cache too, and exercises answering a neighbouring question (one notebook
# whose scipy import stops only its own cell left out); the thirtieth with loops and plain Python,
# and MATLAB's, R's and spreadsheets' habits: counting from 1, loops one short, accumulators reset
# too seldom, one row buffer kept by reference, arrays of integers, Fortran order; the thirty-first
# with a statistician's habits: z-scores, min-max scaling, medians, clipping, correlation for the dot
# product, nan_to_num, rounding for display, and pandas' axes; the thirty-second vectorized cleverly
# but wrongly: einsum subscripts, np.newaxis in the wrong place, tensordot, np.inner, sums over a
# tuple of axes, stacking along the wrong axis, fancy indexing that copies; the thirty-third, two
# fifths of them notebooks, with habits from C, Fortran, Julia and JAX and numpy's rarer tools used
# wrongly: flat index arithmetic, column-major reshapes, `np.vectorize` without a signature,
# `np.matmul(out=...)` into one buffer, `np.apply_along_axis`, `np.multiply.outer`, stride tricks,
# prefix sums, and a dict zipped from names in another order; the thirty-fifth (the thirty-fourth
# checked what one mistake costs, not how it is named), two fifths of them notebooks, on the five
# exercises and defensive or hacky code: edge cases of the row list and of T = 1, predicates
# loosened or tightened, neighbouring quantities, try/except fallbacks, special cases for the
# example's shapes, asserts that refuse valid input, caches, and random tie-breaks; the thirty-sixth,
# two fifths of them notebooks, with copy-paste, refactoring and notebook-state slips: globals of the
# setup cell read in place of arguments, one of three parallel lines left unchanged, names shadowed by
# a loop or a debugging line, parameters reordered in a def, slices and transposes kept from
# debugging, integer and float32 casts, a stage pasted twice, and a mean divided by T once more; the
# thirty-seventh, two fifths of them notebooks, with numpy's shapes, containers and numeric types as
# a newcomer gets them wrong: `np.matrix`, keepdims dropped or added, reshape for transpose, Python
# lists and Python's own sum and max, `np.dot` and `np.outer` on vectors, integer, float32 and float16
# arrays, squeezed axes, `x.shape[1]` on a batch, and results rounded for display; the fortieth, two
# fifths of them notebooks, with the idioms of a fluent numpy user (einsum subscripts, tensordot axes,
# swapaxes and moveaxis, `out=` and `where=` arguments, masks, logsumexp, apply_along_axis) and
# exercises answering a neighbouring question (one row's sum for all, a relative tolerance, the
# weights for the output); the forty-first, two fifths of them notebooks, with the chapter's
# mathematics translated literally: column-vector conventions (W x, Wᵀ), one-based loop bounds, sums
# over the wrong index, √ around the wrong quantity, the worked numbers retyped, and the exercises
# answered from a formula of the text misread; the forty-second, an eighth of them notebooks (one whose
# head caches on `id(x)` left out: what it returns depends on where arrays land in memory), with
# Python's state, aliasing and types: arguments changed in place, views kept, globals and caches kept
# between calls, integer arrays filled with fractions, loops with a stale index, and exercises whose
# baseline shares its arrays with the changed copy; the forty-third, a third of them notebooks, with
# code right on the chapter's example by coincidence: sizes read from an axis the example's equal,
# transposes its symmetric matrices hide, constants that are its values, code for T of two or more,
# batches that work only where B equals another size, and exercises answered from its numbers.
FRESH: dict[str, Fresh] = {**_read("fresh.json"), **_read("fresh2.json", "second-"), **_read("fresh3.json", "third-"),
                           **_read("fresh4.json", "fourth-"), **_read("fresh5.json", "fifth-"),
                           **_read("fresh6.json", "sixth-"), **_read("fresh7.json", "seventh-"),
                           **_read("fresh8.json", "eighth-"), **_read("fresh9.json", "ninth-"),
                           **_read("fresh10.json", "tenth-"), **_read("fresh11.json", "eleventh-"),
                           **_read("fresh12.json", "twelfth-"), **_read("fresh13.json", "thirteenth-"),
                           **_read("fresh14.json", "fourteenth-"),
                           **_read("fresh15.json", "fifteenth-"), **_read("fresh16.json", "sixteenth-"),
                           **_read("fresh18.json", "eighteenth-"), **_read("fresh19.json", "nineteenth-"),
                           **_read("fresh20.json", "twentieth-"),
                           **_read("fresh21.json", "twenty-first-"), **_read("fresh22.json", "twenty-second-"),
                           **_read("fresh23.json", "twenty-third-"), **_read("fresh24.json", "twenty-fourth-"),
                           **_read("fresh25.json", "twenty-fifth-"), **_read("fresh26.json", "twenty-sixth-"),
                           **_read("fresh27.json", "twenty-seventh-"), **_read("fresh28.json", "twenty-eighth-"),
                           **_read("fresh29.json", "twenty-ninth-"), **_read("fresh30.json", "thirtieth-"),
                           **_read("fresh31.json", "thirty-first-"), **_read("fresh32.json", "thirty-second-"),
                           **_read("fresh33.json", "thirty-third-"), **_read("fresh35.json", "thirty-fifth-"),
                           **_read("fresh36.json", "thirty-sixth-"), **_read("fresh37.json", "thirty-seventh-"),
                           **_read("fresh40.json", "fortieth-"),
                           **_read("fresh41.json", "forty-first-"), **_read("fresh42.json", "forty-second-"),
                           **_read("fresh43.json", "forty-third-")}
