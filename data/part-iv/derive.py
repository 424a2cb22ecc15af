"""Derive the chapter's expected values and write them to attention.json.

Nothing here uses numpy or the reference solution, so the file can judge both. The integer arrays
(Q, K, V and the dot products D) come from explicit sums over Python ints. The scaled scores, the
weights and the outputs come from written closed forms in s = 1/sqrt(d_k) and r = exp(s): each
formula is kept as text in the file and evaluated from that same text with mpmath at 50 significant
digits, then rounded once to the nearest float64.

    python data/part-iv/derive.py            # rewrite attention.json
    python data/part-iv/derive.py --check    # exit 1 if attention.json is not what this writes
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from fractions import Fraction
from pathlib import Path

import mpmath

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "attention.json"
DIGITS = 50
TOLERANCE = 1e-12  # the declared absolute tolerance (CONTRACT.md, section 4)

# Example 15.1: three positions (red, key, .) with two coordinates each, and the three W matrices.
X = [[1, 0], [0, 1], [1, 1]]
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 1], [0, 1]]
W_V = [[1, 0], [1, 2]]

# The weights of each receiving row as the chapter writes them (section 15.3): the exponentials of
# the scaled scores, divided through by a common power of r, over their total.
A_FORMS = ("[r,1,r]/(2r+1)", "[1,1,r]/(2+r)", "[r,1,r^2]/(r+1+r^2)")

# The exercises of section 15.8 that have numeric answers.
EX1_QUERY = [0, 0]  # exercise 1: the third query replaced by zeros
EX3_SHIFT = [2, -1]  # exercise 3: the vector added to value rows
EX3_ROWS = [0]  # exercise 3, second part: only the chapter's "row 1" (index 0) is shifted
EX4 = {"t": 5, "d_k": 4, "d_v": 3}  # exercise 4: Q/K shapes [5, 4], V shape [5, 3]


def require(condition, message):
    """Stop the derivation when a consistency check fails (unlike assert, also under python -O)."""
    if not condition:
        raise ValueError(message)


# --- exact integer arithmetic -------------------------------------------------------------------

def matmul(a, b):
    """The product of two integer matrices, one explicit sum per element."""
    inner = len(b)
    require(all(len(row) == inner for row in a), "inner dimensions differ")
    return [[sum(row[k] * b[k][j] for k in range(inner)) for j in range(len(b[0]))] for row in a]


def transpose(a):
    return [[a[i][j] for i in range(len(a))] for j in range(len(a[0]))]


# --- closed forms, kept as text and evaluated from that text ------------------------------------

_FUNCTIONS = {"sqrt": mpmath.sqrt, "exp": mpmath.exp}
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
              ast.Pow: lambda a, b: a ** b}


def evaluate(form, names):
    """Evaluate a closed form such as "[r,1,r^2]/(r+1+r^2)" with mpmath.

    The notation is the chapter's: `^` for powers and `2r` for 2*r. A bracketed list divided by a
    scalar gives a list. Only numbers, the given names, sqrt, exp and + - * / ^ are understood.
    """
    python = re.sub(r"(\d)([A-Za-z(])", r"\1*\2", form.replace("^", "**"))
    return _evaluate(ast.parse(python, mode="eval").body, names)


def _evaluate(node, names):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return mpmath.mpf(node.value)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, names)
    if isinstance(node, ast.List):
        return [_evaluate(item, names) for item in node.elts]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        apply = _OPERATORS[type(node.op)]
        if isinstance(left, list) and not isinstance(right, list):
            return [apply(item, right) for item in left]
        if isinstance(left, list) or isinstance(right, list):
            raise ValueError("only a list divided by a scalar is supported")
        return apply(left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS and len(node.args) == 1 and not node.keywords):
        return _FUNCTIONS[node.func.id](_evaluate(node.args[0], names))
    raise ValueError(f"unsupported expression: {ast.unparse(node)}")


def multiple_of_s(n):
    """The text of n*s: "0", "s", "2s", ..."""
    return {0: "0", 1: "s"}.get(n, f"{n}s")


def split_row_form(form):
    """Split "[r,1,r]/(2r+1)" into its numerators ["r", "1", "r"] and its denominator "2r+1"."""
    match = re.fullmatch(r"\[([^\]]*)\]/\((.*)\)", form)
    if not match:
        raise ValueError(f"not a row form: {form}")
    return match.group(1).split(","), match.group(2)


def output_form(row_form, v, j):
    """Output element (i, j) as text: row i's weight numerators times column j of V, over the total."""
    numerators, denominator = split_row_form(row_form)
    terms = " + ".join(f"{n}*{v[k][j]}" for k, n in enumerate(numerators))
    return f"({terms})/({denominator})"


def to_float64(x):
    """Round a high-precision value once to the nearest float64.

    The mpf is an exact binary fraction; converting a Fraction to float rounds correctly.
    """
    mantissa, exponent = x.man_exp
    return float(Fraction(mantissa) * Fraction(2) ** exponent)


def close(a, b):
    return abs(a - b) < mpmath.mpf(10) ** (5 - DIGITS)


def check_rows_are_softmax(a, d, r):
    """Tie the written weight forms to the integer scores D.

    Softmax over a row is fixed by two facts: every weight is proportional to r^D[i][j]
    (exp(s*D) = r^D), and the row sums to one. Both must hold for every receiving row.
    """
    for i, row in enumerate(a):
        ratios = [row[j] / r ** d[i][j] for j in range(len(row))]
        require(all(close(x, ratios[0]) for x in ratios), f"row {i + 1} is not proportional to r^D")
        require(close(mpmath.fsum(row), 1), f"row {i + 1} does not sum to one")


# --- the document -------------------------------------------------------------------------------

def derive():
    """Return the whole attention.json document as plain Python data, keys in their fixed order."""
    mpmath.mp.dps = DIGITS

    q, k, v = matmul(X, W_Q), matmul(X, W_K), matmul(X, W_V)
    d = matmul(q, transpose(k))
    d_k = len(W_Q[0])

    s_form = f"1/sqrt({d_k})"
    r_form = f"exp({s_form})"
    s = evaluate(s_form, {})
    r = evaluate(r_form, {})
    names = {"s": s, "r": r}

    s_forms = [[multiple_of_s(n) for n in row] for row in d]
    s_exact = [[evaluate(f, names) for f in row] for row in s_forms]

    require(len(A_FORMS) == len(X), "one weight form per receiving row")
    a_exact = [evaluate(f, names) for f in A_FORMS]
    check_rows_are_softmax(a_exact, d, r)

    o_forms = [[output_form(A_FORMS[i], v, j) for j in range(len(v[0]))] for i in range(len(X))]
    o_exact = [[evaluate(f, names) for f in row] for row in o_forms]

    # Exercise 1: a zero query scores 0 against every key, whatever the keys are.
    ex1_scores = [sum(qc * kc for qc, kc in zip(EX1_QUERY, key)) for key in k]
    ex1_exp = [mpmath.exp(s * n) for n in ex1_scores]
    ex1_weights = [e / mpmath.fsum(ex1_exp) for e in ex1_exp]
    ex1_output = [mpmath.fsum(w * v[j][c] for j, w in enumerate(ex1_weights))
                  for c in range(len(v[0]))]

    # Exercise 3: shifting value row j by `shift` moves output row i by shift * A[i][j].
    whole = [[o_exact[i][c] + EX3_SHIFT[c] for c in range(len(EX3_SHIFT))] for i in range(len(X))]
    partial = [[o_exact[i][c] + EX3_SHIFT[c] * mpmath.fsum(a_exact[i][j] for j in EX3_ROWS)
                for c in range(len(EX3_SHIFT))] for i in range(len(X))]

    def floats(nested):
        if isinstance(nested, list):
            return [floats(item) for item in nested]
        return to_float64(nested)

    return {
        "$schema": "attention.schema.json",
        "chapter": {"number": 15, "title": "Self-Attention and Q/K/V"},
        "tolerance": {"absolute": TOLERANCE},
        "inputs": {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V},
        "exact": {"Q": q, "K": k, "V": v, "D": d},
        "closed_forms": {"s": s_form, "r": r_form, "S": s_forms, "A": list(A_FORMS), "O": o_forms},
        "values": {"S": floats(s_exact), "A": floats(a_exact), "O": floats(o_exact)},
        "exercises": {
            "ex1_zero_query": {"query": EX1_QUERY, "weights": floats(ex1_weights),
                               "output": floats(ex1_output)},
            "ex3_value_shift": {"shift": EX3_SHIFT, "rows": EX3_ROWS,
                                "whole_shift_output": floats(whole),
                                "row1_shift_output": floats(partial)},
            "ex4_shapes": {**EX4,
                           "divisor": to_float64(mpmath.sqrt(EX4["d_k"])),
                           "score_shape": [EX4["t"], EX4["t"]],
                           "output_shape": [EX4["t"], EX4["d_v"]],
                           "softmax_axis": -1},
        },
    }


def render(value, indent=0, width=100):
    """JSON text in which every object is broken into lines and every array that fits stays on one.

    A matrix therefore reads as a block of rows, and the output is the same on every run.
    """
    if isinstance(value, dict):
        inner = " " * (indent + 2)
        items = [f"{inner}{json.dumps(key)}: {render(item, indent + 2, width)}"
                 for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    flat = json.dumps(value, separators=(", ", ": "))
    if not isinstance(value, list) or indent + len(flat) <= width:
        return flat
    inner = " " * (indent + 2)
    items = [inner + render(item, indent + 2, width) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def text():
    return render(derive()) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the file differs from what would be written")
    parser.add_argument("--output", type=Path, default=OUTPUT,
                        help="where to write (or, with --check, what to compare); default %(default)s")
    args = parser.parse_args(argv)
    expected = text()
    if args.check:
        try:
            on_disk = args.output.read_text(encoding="utf-8")
        except OSError as error:
            print(f"derive.py: cannot read {args.output}: {error.strerror}", file=sys.stderr)
            return 1
        if on_disk != expected:
            print(f"derive.py: {args.output} is out of date; rerun without --check", file=sys.stderr)
            return 1
        print(f"derive.py --check: {args.output} is up to date.")  # as qkv-release --check says it
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(expected, encoding="utf-8", newline="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
