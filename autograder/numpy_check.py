"""qkv-check: run the reference head on the chapter's example and compare it with attention.json.

The expected values were derived without numpy (data/part-iv/derive.py), so agreement here is an
arithmetic check of the reference and of the numpy it runs on, not a check of one against itself.
Integer results (Q, K, V and the dot products D) must match exactly; every float must lie within
the data file's absolute tolerance. The figures are printed as a table and kept in a JSON trace
together with the numpy and python versions and the platform.

Exit status: 0 when everything agrees, 1 when something differs, 2 when the data file (or the
reference solution) cannot be read.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .store import changeable_above, write_atomically

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "autograder" / "_data" / "part-iv" / "attention.json"  # _data: the project's data/
SCHEMA = DATA.with_name("attention.schema.json")
REFERENCE = ROOT / "solutions" / "attention_head.py"
TRACE = Path("runs") / "numpy-run.json"


class CheckError(Exception):
    """Something the check needs could not be read; the message is one line for the user."""


@dataclass(frozen=True)
class Comparison:
    name: str
    """What was compared, as it appears in the table and in the trace."""
    shape: tuple[int, ...]
    """The expected shape."""
    difference: float | None
    """The largest absolute difference; None when the shapes differ or a value is not finite."""
    exact_required: bool
    """True for integer results, which any correct float64 computation reproduces bit for bit."""
    tolerance: float
    """The data file's absolute tolerance, used when an exact match is not required."""

    @property
    def exact(self) -> bool:
        return self.difference == 0.0

    @property
    def ok(self) -> bool:
        if self.difference is None:
            return False
        return self.exact if self.exact_required else self.difference <= self.tolerance


def load_data(path: Path) -> dict:
    """Read the expected values and validate them against the project's schema."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise CheckError(f"cannot read data file {path}: {error.strerror or error}") from None
    except ValueError as error:  # includes json.JSONDecodeError and bad UTF-8
        raise CheckError(f"data file {path} is not valid JSON: {error}") from None
    try:
        schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckError(f"cannot read schema {SCHEMA}: {error}") from None
    from jsonschema import Draft202012Validator  # imported only here: the rest needs numpy alone
    from jsonschema.exceptions import best_match

    problem = best_match(Draft202012Validator(schema).iter_errors(data))
    if problem is not None:
        raise CheckError(f"data file {path} does not match its schema at {problem.json_path}: "
                         f"{problem.message}")
    return data


def load_reference():
    """Import solutions/attention_head.py from this checkout, whatever the current directory."""
    spec = importlib.util.spec_from_file_location("_qkv_reference_head", REFERENCE)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (OSError, SyntaxError, ImportError) as error:
        raise CheckError(f"cannot load the reference solution {REFERENCE}: {error}") from None
    return module


def compare(name, actual, expected, tolerance, exact_required=False) -> Comparison:
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    difference = None
    if actual.shape == expected.shape:
        largest = float(np.max(np.abs(actual - expected), initial=0.0))
        difference = largest if math.isfinite(largest) else None
    return Comparison(name, expected.shape, difference, exact_required, tolerance)


def run_checks(data: dict) -> list[Comparison]:
    """Run the reference on the data file's inputs and compare every result with the file."""
    head = load_reference()
    tolerance = data["tolerance"]["absolute"]
    inputs = {key: np.array(value, dtype=np.float64) for key, value in data["inputs"].items()}
    exact, values, exercises = data["exact"], data["values"], data["exercises"]

    q, k, v = head.project_qkv(inputs["X"], inputs["W_Q"], inputs["W_K"], inputs["W_V"])
    d = head.scores(q, k)  # [T, T]
    s = head.scale(d, q.shape[-1])  # [T, T]
    a = head.softmax_rows(s)  # [T, T]
    o = head.mix(a, v)  # [T, d_v]

    ex1_weights, ex1_output = head.zero_query_mixture(k, v)
    ex3 = exercises["ex3_value_shift"]
    shift = np.array(ex3["shift"], dtype=np.float64)
    whole = head.shifted_output(a, v, shift)
    partial = head.shifted_output(a, v, shift, rows=ex3["rows"])
    ex4 = exercises["ex4_shapes"]
    facts = head.head_facts(ex4["t"], ex4["d_k"], ex4["d_v"])

    def within(name, actual, expected):
        return compare(name, actual, expected, tolerance)

    def equal(name, actual, expected):
        return compare(name, actual, expected, tolerance, exact_required=True)

    return [
        equal("Q", q, exact["Q"]),
        equal("K", k, exact["K"]),
        equal("V", v, exact["V"]),
        equal("D", d, exact["D"]),
        within("S", s, values["S"]),
        within("A", a, values["A"]),
        within("O", o, values["O"]),
        within("ex1 weights", ex1_weights, exercises["ex1_zero_query"]["weights"]),
        within("ex1 output", ex1_output, exercises["ex1_zero_query"]["output"]),
        within("ex3 whole shift", whole, ex3["whole_shift_output"]),
        within("ex3 row-1 shift", partial, ex3["row1_shift_output"]),
        within("ex4 divisor", facts["divisor"], ex4["divisor"]),
        equal("ex4 score shape", facts["score_shape"], ex4["score_shape"]),
        equal("ex4 output shape", facts["output_shape"], ex4["output_shape"]),
        # For a [T, T] score matrix, axis 1 and axis -1 name the same axis.
        equal("ex4 softmax axis", facts["softmax_axis"] % 2, ex4["softmax_axis"] % 2),
    ]


def trace(comparisons: list[Comparison], data: dict, data_path: Path) -> dict:
    """The run's record: where it ran, and for each comparison how far apart the two sides were."""
    return {
        "data": str(data_path),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "tolerance": dict(data["tolerance"]),
        "arrays": {
            c.name: {"shape": list(c.shape), "max_abs_difference": c.difference, "exact": c.exact,
                     "required": "exact" if c.exact_required else "within tolerance", "ok": c.ok}
            for c in comparisons
        },
        "ok": all(c.ok for c in comparisons),
    }


def table(comparisons: list[Comparison]) -> str:
    def difference(c):
        if c.difference is None:
            return "mismatch"
        return "0" if c.exact else f"{c.difference:.3g}"

    rows = [("array", "shape", "max |diff|", "tolerance", "ok")]
    rows += [(c.name, str(list(c.shape)), difference(c),
              "exact" if c.exact_required else f"{c.tolerance:g}", "yes" if c.ok else "NO")
             for c in comparisons]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="qkv-check",
        description="Compare the reference attention head with the chapter's expected values.")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="expected values to compare with (default: %(default)s)")
    parser.add_argument("--trace", type=Path, default=TRACE,
                        help="where to write the JSON trace, relative to the current directory "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)

    try:
        data = load_data(args.data)
        comparisons = run_checks(data)
        record = trace(comparisons, data, args.data)
        above = changeable_above(args.trace)
        if above is not None:  # someone else could swap its folder for a link to one of yours
            raise CheckError(f"cannot write trace {args.trace}: {above}; pass --trace a path in a folder of your own")
        try:
            args.trace.parent.mkdir(parents=True, exist_ok=True)
            # replaced whole, never written through a link that stands at its name
            write_atomically(args.trace, json.dumps(record, indent=2) + "\n")
        except OSError as error:
            raise CheckError(f"cannot write trace {args.trace}: {error.strerror or error}") from None
    except CheckError as error:
        print(f"qkv-check: {error}", file=sys.stderr)
        return 2

    print(f"qkv-check: reference head against {args.data} (numpy {np.__version__}, "
          f"python {platform.python_version()}, {platform.machine()})")
    print(table(comparisons))
    failed = [c.name for c in comparisons if not c.ok]
    if failed:
        print(f"differs: {', '.join(failed)}; trace written to {args.trace}")
        return 1
    print(f"all {len(comparisons)} comparisons agree; trace written to {args.trace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
