"""qkv-grade beside nbgrader, in one run on the same submissions.

Run: python benchmarks/bench_side_by_side.py [--notebooks 50] [--modules 200]

Measures, on this machine and in this order:
  1. the floor, `python -c "import numpy"` (median of five);
  2. `qkv-grade` on a folder of `--modules` .py submissions;
  3. `nbgrader autograde` on a course of `--notebooks` submitted notebooks;
  4. the trusted path, `qkv-grade --nbgrader`, on the same notebooks.
It prints each one's time, throughput and ratio to the floor, and the trusted path's speed-up
over `nbgrader autograde`. Targets: the folder of 200 within 25x the floor; the trusted path at
least 30x faster than autograde. Needs the nbgrader extra (`pip install -e ".[nbgrader]"`).
Jupyter's folders and HOME point into a temporary directory; nothing is written elsewhere.
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_grade import make_class  # the same class of .py submissions as the folder benchmark

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support import jupyter_env  # noqa: E402  (the test suite's: Jupyter's folders in a temp dir)
ASSIGNMENT = "ps1"
# The notebooks: the reference, and the reference with one misconception, in turn.
VARIANTS = [
    [],
    [("shifted = s - s.max(axis=-1, keepdims=True)", "shifted = s - s.max(axis=-2, keepdims=True)"),
     ("a = e / e.sum(axis=-1, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")],
    [("d = q @ k_t", "d = k @ np.swapaxes(q, -1, -2)")],
    [("s = d / np.sqrt(d_k)  # [T, T]", "s = d / d_k  # [T, T]")],
    [("shifted = s - s.max(axis=-1, keepdims=True)", "shifted = s")],
]


def run(argv: list[str], cwd: Path, env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed:\n{done.stderr[-2000:]}")
    return seconds


def reference_source() -> str:
    text = (REPO / "solutions" / "attention_head.py").read_text()
    return re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION\n", "", text, flags=re.M)


def make_course(root: Path, env: dict, notebooks: int) -> Path:
    import nbformat

    from autograder import release
    from autograder.nbgrader_course import NOTEBOOK

    run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"], root, env)
    course = root / "course"
    run([sys.executable, "-m", "autograder.nbgrader_course", str(course), "--seed", "1"], root, env)
    run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT], course, env)
    released = course / "release" / ASSIGNMENT
    for index in range(notebooks):
        source = reference_source()
        for old, new in VARIANTS[index % len(VARIANTS)]:
            source = source.replace(old, new)
        functions = release.function_sources(source)
        notebook = nbformat.read(released / NOTEBOOK, as_version=4)
        for cell in notebook.cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                if cell.cell_type == "code":
                    cell.source = functions[re.match(r"def (\w+)", cell.source).group(1)]
                else:
                    cell.source = "Equal weights still deliver the values: their mean."
        folder = course / "submitted" / f"student{index:03d}" / ASSIGNMENT
        folder.mkdir(parents=True)
        for path in released.iterdir():
            if path.suffix != ".ipynb":
                shutil.copy(path, folder / path.name)
        nbformat.write(notebook, folder / NOTEBOOK)
    return course


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=int, default=50)
    parser.add_argument("--modules", type=int, default=200)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = jupyter_env(root)
        floor = statistics.median(run([python, "-c", "import numpy"], root) for _ in range(5))
        (root / "modules").mkdir()
        make_class(root / "modules", args.modules)
        modules = run([python, "-m", "autograder.cli", str(root / "modules"), "--format", "json", "--seed", "1",
                       "--out", str(root / "modules-out")], root)
        course = make_course(root, env, args.notebooks)
        autograde = run([python, "-m", "nbgrader", "autograde", ASSIGNMENT], course, env)
        trusted = run([python, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT], root, env)

    rows = [("floor: python -c 'import numpy'", floor, 1),
            (f"qkv-grade, {args.modules} .py submissions", modules, args.modules),
            (f"nbgrader autograde, {args.notebooks} notebooks", autograde, args.notebooks),
            (f"qkv-grade --nbgrader, {args.notebooks} notebooks", trusted, args.notebooks)]
    print(f"{'measurement':<42} {'seconds':>8} {'per item':>9} {'items/s':>8} {'x floor':>8}")
    for name, seconds, items in rows:
        print(f"{name:<42} {seconds:>8.2f} {1000 * seconds / items:>7.1f}ms {items / seconds:>8.1f} "
              f"{seconds / floor:>8.1f}")
    print(f"\nfolder of {args.modules}: {modules / floor:.1f}x the floor (target <= {25 * args.modules / 200:g}x)")
    print(f"trusted path vs nbgrader autograde: {autograde / trusted:.1f}x faster (target >= 30x)")


if __name__ == "__main__":
    main()
