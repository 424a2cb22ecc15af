"""How fast qkv-grade is, as ratios to the cost of starting Python and importing numpy.

Run: python benchmarks/bench_grade.py [--submissions 200] [--repeat 5]

In one run it measures the floor (`python -c "import numpy"`), one submission graded end to end,
and a folder of submissions graded end to end, in interleaved rounds, and prints the median of
each round's ratio to the floor. Targets: one submission <= 3x the floor, 200 submissions <= 25x.
Machines are noisy, so this prints numbers rather than asserting them.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "data" / "sample-class").glob("*.py"))


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def make_class(folder: Path, count: int) -> None:
    """A class of `count` submissions, cycling through the samples without the one that loops."""
    quick = [path for path in SAMPLES if "infinite loop" not in path.read_text()]
    for index in range(count):
        shutil.copy(quick[index % len(quick)], folder / f"student{index:03d}.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    grade = [sys.executable, "-m", "autograder.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        make_class(folder, args.submissions)
        one_argv = grade + [str(REPO / "solutions" / "attention_head.py"), "--format", "json", "--seed", "1"]
        many_argv = grade + [str(folder), "--format", "json", "--seed", "1", "--out", str(Path(tmp) / "out")]
        # Rounds interleave the three, so a slow moment of the machine hits all of them alike; each
        # ratio is taken within a round, then the median over rounds is reported.
        rounds = []
        for _ in range(args.repeat):
            floor = statistics.median(timed([sys.executable, "-c", "import numpy"]) for _ in range(3))
            rounds.append((floor, timed(one_argv), timed(many_argv)))
    floor = statistics.median(r[0] for r in rounds)
    one = statistics.median(r[1] for r in rounds)
    many = statistics.median(r[2] for r in rounds)
    rows = [("floor: python -c 'import numpy'", floor, 1.0, None),
            ("one submission graded", one, statistics.median(r[1] / r[0] for r in rounds), 3.0),
            (f"{args.submissions} submissions graded", many, statistics.median(r[2] / r[0] for r in rounds),
             25.0 * args.submissions / 200)]
    print(f"{'measurement':<36} {'seconds':>8} {'x floor':>8} {'target':>8}")
    for name, seconds, ratio, target in rows:
        print(f"{name:<36} {seconds:>8.3f} {ratio:>8.2f} {('<= %gx' % target) if target else '':>8}")
    print(f"per submission in the folder: {1000 * many / args.submissions:.1f} ms")


if __name__ == "__main__":
    main()
