"""How many mistakes the grader names, step by step: the grammar's compositions and the hand-written set.

Run: python benchmarks/diagnosis_coverage.py [--seed 7] [--pairs N] [--list]

The corpus generated from the grammar (tests/submissions/grammar.py) has one submission per slip,
in every way of writing it, and one per pair of slips on different stages of a function. Each is
graded in one real qkv-grade run, and every step it shows on (the step fails) is counted as named
exactly, named by an equivalent composition (one that returns the same values on every call of
the step), or missed. The hand-written realistic mistakes (tests/submissions/realistic.py) are
counted as named when a step carries a code, and the unusual correct solutions must lose nothing.
The held-out set (tests/submissions/unlisted.py), mistakes written with no list of misconceptions in
mind, is counted the same way, but a step counts as named only when it carries a code of a
mistake (a slip, a composition or a derived edit), not merely a description of how its values look
(wrong-shape, non-finite, crashed, hard-coded, wrong-type).
Targets: every grammar composition named; at least 90% of the hand-written steps named.
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from submissions import grammar  # noqa: E402
from submissions.realistic import MISTAKES, UNUSUAL  # noqa: E402
from submissions.unlisted import UNLISTED  # noqa: E402
from support import qkv_grade  # noqa: E402

from autograder.steps import STEP_IDS  # noqa: E402


def grammar_table(verdicts) -> list[tuple]:
    rows = []
    for step in STEP_IDS:
        kinds = collections.Counter(v.kind for v in verdicts if v.step == step)
        shown = sum(kinds.values())
        named = kinds["exact"] + kinds["equivalent"]
        rows.append((step, shown, kinds["exact"], kinds["equivalent"], kinds["missed"],
                     f"{100.0 * named / shown:.1f}%" if shown else "-"))
    return rows


def handwritten(seed: int) -> tuple[list[tuple], list[str]]:
    folder = Path(tempfile.mkdtemp(prefix="qkv-realistic-"))
    try:
        (folder / "in").mkdir()
        for name, submission in {**MISTAKES, **UNUSUAL}.items():
            (folder / "in" / f"{name}.py").write_text(submission.text())
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(seed), "--out", str(folder / "out"))
        assert done.returncode == 0, done.stderr
        results = {r["submission"].removesuffix(".py"): r for r in json.loads(done.stdout)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, problems = [], []
    for step_index, step in enumerate(STEP_IDS):
        shown = named = 0
        for name in MISTAKES:
            graded = results[name]["steps"][step_index]
            if graded["status"] != "passed":
                shown += 1
                named += bool(graded["diagnoses"])
        rows.append((step, shown, named, f"{100.0 * named / shown:.1f}%" if shown else "-"))
    for name in UNUSUAL:
        if results[name]["score"] != results[name]["max_score"]:
            problems.append(f"correct solution {name} lost points")
    return rows, problems


LOOKS = {"wrong-shape", "non-finite", "crashed", "hard-coded", "wrong-type", "not-implemented"}


def held_out(seed: int) -> list[tuple]:
    """Per step: how many steps of the held-out mistakes fail, and how many of those name a mistake."""
    folder = Path(tempfile.mkdtemp(prefix="qkv-unlisted-"))
    try:
        (folder / "in").mkdir()
        for name, submission in UNLISTED.items():
            (folder / "in" / f"{name}.py").write_text(submission.text())
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(seed), "--out", str(folder / "out"))
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for step_index, step in enumerate(STEP_IDS):
        failing = [r["steps"][step_index] for r in results if r["steps"][step_index]["status"] != "passed"]
        named = sum(bool(set(graded["diagnoses"]) - LOOKS) for graded in failing)
        rows.append((step, len(failing), named, f"{100.0 * named / len(failing):.1f}%" if failing else "-"))
    return rows


def show(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                        for i, (cell, width) in enumerate(zip(row, widths))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pairs", type=int, default=None, help="grade a sample of this many pairs (default: all)")
    parser.add_argument("--list", action="store_true", help="list every missed composition")
    args = parser.parse_args()

    pairs = grammar.pairs()
    choices = grammar.singles() + (pairs if args.pairs is None else grammar.sample(pairs, args.pairs))
    verdicts = grammar.judge(choices, args.seed)
    print(f"Grammar corpus: {len(choices)} compositions ({len(grammar.singles())} single slips, "
          f"{len(choices) - len(grammar.singles())} of {len(pairs)} pairs), seed {args.seed}")
    rows = grammar_table(verdicts)
    show(("step", "shown", "exact", "equivalent", "missed", "named"), rows)
    missed = [v for v in verdicts if v.kind == "missed"]
    total = len(verdicts)
    print(f"all steps: {total - len(missed)} of {total} named ({100.0 * (total - len(missed)) / total:.2f}%)")
    for verdict in missed if args.list else missed[:10]:
        print(f"  missed: {verdict.submission} on {verdict.step}: expected {list(verdict.expected)}, got {verdict.got}")

    rows, problems = handwritten(args.seed)
    print(f"\nHand-written realistic mistakes: {len(MISTAKES)}; unusual correct solutions: {len(UNUSUAL)}")
    show(("step", "shown", "named", "share"), rows)
    shown, named = sum(row[1] for row in rows), sum(row[2] for row in rows)
    print(f"all steps: {named} of {shown} named ({100.0 * named / shown:.1f}%)")
    for problem in problems:
        print(f"  {problem}")

    rows = held_out(args.seed)
    print(f"\nHeld-out mistakes (unlisted.py): {len(UNLISTED)}")
    show(("step", "shown", "named", "share"), rows)
    shown, named = sum(row[1] for row in rows), sum(row[2] for row in rows)
    print(f"all steps: {named} of {shown} named by a mistake ({100.0 * named / shown:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
