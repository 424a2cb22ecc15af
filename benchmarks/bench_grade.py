"""How fast qkv-grade is, as ratios to the cost of starting Python and importing numpy.

Run: python benchmarks/bench_grade.py [--submissions 200] [--repeat 5]

In one run it measures the floor (`python -c "import numpy"`), one submission graded end to end,
and a folder of submissions graded end to end, each as the median of several runs, and prints
each as a ratio to the floor. Targets: one submission <= 3x the floor, 200 submissions <= 25x.
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


def timed(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


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
        floor = timed([sys.executable, "-c", "import numpy"], args.repeat)
        one = timed(grade + [str(REPO / "solutions" / "attention_head.py"), "--format", "json", "--seed", "1"],
                    args.repeat)
        many = timed(grade + [str(folder), "--format", "json", "--seed", "1", "--out", str(Path(tmp) / "out")],
                     max(1, args.repeat // 2))
    rows = [("floor: python -c 'import numpy'", floor, None),
            ("one submission graded", one, 3.0),
            (f"{args.submissions} submissions graded", many, 25.0 * args.submissions / 200)]
    print(f"{'measurement':<36} {'seconds':>8} {'x floor':>8} {'target':>8}")
    for name, seconds, target in rows:
        ratio = seconds / floor
        print(f"{name:<36} {seconds:>8.3f} {ratio:>8.2f} {('<= %gx' % target) if target else '':>8}")
    print(f"per submission in the folder: {1000 * many / args.submissions:.1f} ms")


if __name__ == "__main__":
    main()
