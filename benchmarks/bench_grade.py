"""How fast qkv-grade is, as ratios to the cost of starting Python and importing numpy.

Run: python benchmarks/bench_grade.py [--submissions 200] [--repeat 5] [--modes bwrap,landlock]

In one run it measures the floor (`python -c "import numpy"`), one submission graded end to end,
and a folder of submissions graded end to end, for every sandbox mode this machine offers (or
those named), in interleaved rounds, and prints the median of each round's ratio to the floor,
one column per mode. Targets: one submission <= 3x the floor, 200 submissions <= 25x. Machines are
noisy, so this prints numbers rather than asserting them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "data" / "sample-class").glob("*.py"))


def timed(argv: list[str], mode: str | None = None) -> float:
    env = None if mode is None else {**os.environ, "QKV_SANDBOX": mode}
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def modes(wanted: str | None) -> list[str]:
    """The sandbox modes to measure: those named, or every sealed one available here."""
    sys.path.insert(0, str(REPO))
    from autograder import sandbox

    names = wanted.split(",") if wanted else list(sandbox.AUTO_ORDER)
    return [name for name in names if sandbox.available(name) is None]


def make_class(folder: Path, count: int) -> None:
    """A class of `count` submissions, cycling through the samples without the one that loops."""
    quick = [path for path in SAMPLES if "infinite loop" not in path.read_text()]
    for index in range(count):
        shutil.copy(quick[index % len(quick)], folder / f"student{index:03d}.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--modes", default=None, help="comma-separated sandbox modes (default: all available)")
    args = parser.parse_args()
    # Measure the package as installed, with its bytecode compiled (pip compiles it; a shell with
    # PYTHONDONTWRITEBYTECODE set would otherwise recompile every module in every run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "autograder"), str(REPO / "solutions")],
                   check=True, stdout=subprocess.DEVNULL)
    measured = modes(args.modes)
    grade = [sys.executable, "-m", "autograder.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        make_class(folder, args.submissions)
        one_argv = grade + [str(REPO / "solutions" / "attention_head.py"), "--format", "json", "--seed", "1"]
        many_argv = grade + [str(folder), "--format", "json", "--seed", "1", "--out", str(Path(tmp) / "out")]
        # Rounds interleave every measurement, so a slow moment of the machine hits all of them
        # alike; each ratio is taken within a round, then the median over rounds is reported.
        rounds = []
        for _ in range(args.repeat):
            floor = statistics.median(timed([sys.executable, "-c", "import numpy"]) for _ in range(3))
            rounds.append((floor, {mode: (timed(one_argv, mode), timed(many_argv, mode)) for mode in measured}))
    floor = statistics.median(r[0] for r in rounds)
    print(f"floor: python -c 'import numpy': {floor:.3f} s")
    print(f"{'measurement':<28} {'target':>8}" + "".join(f" {mode:>22}" for mode in measured))
    for label, index, target in (("one submission graded", 0, 3.0),
                                 (f"{args.submissions} submissions graded", 1, 25.0 * args.submissions / 200)):
        cells = []
        for mode in measured:
            seconds = statistics.median(r[1][mode][index] for r in rounds)
            ratio = statistics.median(r[1][mode][index] / r[0] for r in rounds)
            cells.append(f"{seconds:>8.3f} s {ratio:>7.2f}x")
        print(f"{label:<28} {'<= %gx' % target:>8}" + "".join(f" {cell:>22}" for cell in cells))
    for mode in measured:
        many = statistics.median(r[1][mode][1] for r in rounds)
        print(f"per submission in the folder, {mode}: {1000 * many / args.submissions:.1f} ms")
    # The spread says how far one round's ratio can be trusted on this machine.
    print("floor in each round: " + " ".join(f"{r[0]:.3f}" for r in rounds) + " s")
    for mode in measured:
        print(f"{args.submissions} submissions, {mode}, ratio in each round: "
              + " ".join(f"{r[1][mode][1] / r[0]:.1f}x" for r in rounds))


if __name__ == "__main__":
    main()
