"""How fast qkv-grade is, as ratios to the cost of starting Python and importing numpy, and how
much memory the grader holds as the class grows.

Run: python benchmarks/bench_grade.py [--submissions 200] [--repeat 5] [--modes bwrap,landlock]
                                      [--rss 200,5000 | --rss none]

In one run it measures the floor (`python -c "import numpy"`), one submission graded end to end,
a folder of submissions graded end to end (the sample class, cycled), and a mistake-heavy folder
(four submissions in five with at least one mistake, from benchmarks/mistake_class.py), for every
sandbox mode this machine offers (or those named), in interleaved rounds, and prints the median of
each round's ratio to the floor, one column per mode. Targets: one submission <= 3x the floor,
200 submissions <= 25x, mistakes and all. Then it grades mistake-heavy classes of each size in
--rss once and prints the grader process's own peak resident memory (VmHWM) for each, and the
difference between the smallest and the largest (target: within 20 MiB). Machines are noisy, so
this prints numbers rather than asserting them.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
import mistake_class  # noqa: E402

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


# The grader run in this process, which reports its own peak resident memory (VmHWM) on stderr
# once it is done: the grader alone, not its workers or the sealed processes they fork.
PEAK = """
import os, sys
from autograder.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as status:
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
os.write(2, ("peak-rss-kib %s\\n" % peak).encode())
os._exit(code)
"""


def peak_rss(folder: Path, out: Path) -> float:
    """The grader's own peak resident memory, in MiB, grading `folder` (JSON to /dev/null)."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(folder), "--format", "json", "--seed", "1",
                           "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True, cwd=REPO)
    kib = next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak-rss-kib "))
    return int(kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--modes", default=None, help="comma-separated sandbox modes (default: all available)")
    parser.add_argument("--rss", default="200,5000",
                        help="sizes of the mistake-heavy classes whose peak memory is measured, or none")
    args = parser.parse_args()
    # Measure the package as installed, with its bytecode compiled (pip compiles it; a shell with
    # PYTHONDONTWRITEBYTECODE set would otherwise recompile every module in every run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "autograder"), str(REPO / "solutions")],
                   check=True, stdout=subprocess.DEVNULL)
    measured = modes(args.modes)
    grade = [sys.executable, "-m", "autograder.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        folder, heavy = Path(tmp) / "class", Path(tmp) / "mistakes"
        folder.mkdir()
        make_class(folder, args.submissions)
        mistake_class.make_class(heavy, args.submissions)
        one_argv = grade + [str(REPO / "solutions" / "attention_head.py"), "--format", "json", "--seed", "1"]
        many_argv = grade + [str(folder), "--format", "json", "--seed", "1", "--out", str(Path(tmp) / "out")]
        heavy_argv = grade + [str(heavy), "--format", "json", "--seed", "1", "--out", str(Path(tmp) / "out")]
        # Rounds interleave every measurement, so a slow moment of the machine hits all of them
        # alike; each ratio is taken within a round, then the median over rounds is reported.
        rounds = []
        for _ in range(args.repeat):
            floor = statistics.median(timed([sys.executable, "-c", "import numpy"]) for _ in range(3))
            rounds.append((floor, {mode: (timed(one_argv, mode), timed(many_argv, mode), timed(heavy_argv, mode))
                                   for mode in measured}))
        peaks = {}
        for size in ([] if args.rss == "none" else sorted(int(size) for size in args.rss.split(","))):
            shutil.rmtree(heavy)
            mistake_class.make_class(heavy, size)
            shutil.rmtree(Path(tmp) / "out", ignore_errors=True)
            peaks[size] = peak_rss(heavy, Path(tmp) / "out")
    floor = statistics.median(r[0] for r in rounds)
    print(f"floor: python -c 'import numpy': {floor:.3f} s")
    print(f"{'measurement':<34} {'target':>8}" + "".join(f" {mode:>22}" for mode in measured))
    target = 25.0 * args.submissions / 200
    for label, index, goal in (("one submission graded", 0, 3.0),
                               (f"{args.submissions} submissions graded", 1, target),
                               (f"{args.submissions} mistake-heavy graded", 2, target)):
        cells = []
        for mode in measured:
            seconds = statistics.median(r[1][mode][index] for r in rounds)
            ratio = statistics.median(r[1][mode][index] / r[0] for r in rounds)
            cells.append(f"{seconds:>8.3f} s {ratio:>7.2f}x")
        print(f"{label:<34} {'<= %gx' % goal:>8}" + "".join(f" {cell:>22}" for cell in cells))
    for mode in measured:
        many = statistics.median(r[1][mode][1] for r in rounds)
        heavy_seconds = statistics.median(r[1][mode][2] for r in rounds)
        print(f"per submission in the folder, {mode}: {1000 * many / args.submissions:.1f} ms "
              f"(mistake-heavy: {1000 * heavy_seconds / args.submissions:.1f} ms)")
    # The spread says how far one round's ratio can be trusted on this machine.
    print("floor in each round: " + " ".join(f"{r[0]:.3f}" for r in rounds) + " s")
    for mode in measured:
        for label, index in (("", 1), (" mistake-heavy", 2)):
            print(f"{args.submissions}{label} submissions, {mode}, ratio in each round: "
                  + " ".join(f"{r[1][mode][index] / r[0]:.1f}x" for r in rounds))
    if peaks:
        print("grader's peak RSS, mistake-heavy class: "
              + ", ".join(f"{size} submissions {peak:.1f} MiB" for size, peak in peaks.items()))
        if len(peaks) > 1:
            smallest, largest = min(peaks), max(peaks)
            print(f"difference {largest} - {smallest}: {peaks[largest] - peaks[smallest]:+.1f} MiB (target: within 20 MiB)")
    load = os.getloadavg()
    print(f"load average at the end (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
