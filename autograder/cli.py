"""`qkv-grade`: grade a submission, or a folder of them, with the hidden graders.

Imports stay inside functions: `qkv-grade --help` and a bad path answer without loading numpy.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
import sysconfig
from pathlib import Path

EXIT_USAGE = 2


def use_own_tools() -> None:
    """Put this interpreter's scripts folder first on PATH.

    nbgrader starts `alembic` (and Jupyter its kernels) by name. Run as `.venv/bin/qkv-grade`
    without activating the venv, PATH would not reach them, or would reach another install's.
    """
    own = [folder for folder in dict.fromkeys((sysconfig.get_path("scripts"), os.path.dirname(sys.executable)))
           if folder]
    rest = [entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep) if entry not in own]
    os.environ["PATH"] = os.pathsep.join(own + rest)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qkv-grade",
        description="Grade Chapter 15 attention-head submissions: a .py module, an .ipynb notebook, "
                    "or a folder of them. Exit status 0 whenever grading finished, whatever the score.")
    parser.add_argument("path", type=Path, nargs="?", default=None,
                        help="a .py or .ipynb submission, or a folder of submissions")
    parser.add_argument("--format", choices=("text", "json", "gradescope"), default="text",
                        help="text for people (default), json (the published results schema), or "
                             "Gradescope's results.json")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden cases (default: a fresh one, recorded in the results)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder mode: where to write one JSON result per submission and summary.csv "
                             "(default: ./qkv-results)")
    parser.add_argument("--jobs", type=int, default=None, help="folder mode: parallel workers (default: one per core, plus one)")
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds allowed per call (default: 1)")
    parser.add_argument("--report", type=Path, default=None, metavar="DIR",
                        help="folder mode: also write a class report to DIR: index.html (scores, steps, "
                             "misconceptions and who showed them) and scores.csv (needs matplotlib)")
    parser.add_argument("--gradescope-bundle", type=Path, default=None, metavar="ZIP",
                        help="instead of grading, write Gradescope's autograder zip (setup.sh, run_autograder, "
                             "the grader) to ZIP; it grades with --seed (default: a fresh one) and --timeout")
    parser.add_argument("--nbgrader", nargs=2, default=None, metavar=("COURSE", "ASSIGNMENT"),
                        help="instead of PATH, grade every submitted notebook of an nbgrader course's "
                             "assignment in the isolated runner and write the scores and feedback into "
                             "its gradebook (the grades to trust; see autograder/nbgrader_trusted.py); "
                             "uses --seed (default: the course's), --jobs and --timeout")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade even where no sandbox is available (every result then records "
                             "isolation none); by default the strongest sandbox is used, or grading refuses")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    use_own_tools()
    if args.no_sandbox:
        os.environ["QKV_SANDBOX"] = "none"
    if args.gradescope_bundle is not None:
        return _gradescope_bundle(args)
    if args.nbgrader is not None:
        from .nbgrader_trusted import main as grade_course

        options = [f"--timeout={args.timeout}"] + [f"--{name}={value}" for name, value in
                                                    (("seed", args.seed), ("jobs", args.jobs)) if value is not None]
        return grade_course([*args.nbgrader, *options])
    path: Path | None = args.path
    if path is None:
        return _fail("nothing to grade: give a .py, .ipynb or folder PATH (or --gradescope-bundle ZIP)")
    if not path.exists():
        return _fail(f"{path}: no such file or folder")
    if path.is_file() and path.suffix not in (".py", ".ipynb"):
        return _fail(f"{path}: not a .py module or .ipynb notebook (nor a folder of them)")
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    if args.timeout <= 0:
        return _fail("--timeout must be positive")
    if args.report is not None:
        import importlib.util

        if not path.is_dir():
            return _fail("--report needs a folder of submissions")
        if importlib.util.find_spec("matplotlib") is None:
            return _fail("--report needs matplotlib: pip install 'qkv-attention[report]'")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)

    from .runner import Limits, Worker, WorkerFailed
    from .sandbox import SandboxUnavailable

    limits = Limits(call_timeout=args.timeout)
    try:
        if path.is_dir():
            from .grading import Grader

            return _grade_folder(Grader(seed, limits), path, args)
        with Worker(limits) as worker:  # picks the sandbox, or raises SandboxUnavailable
            worker.start()  # the sandbox starts and loads numpy while the hidden cases are built
            from .grading import Grader

            return _grade_file(Grader(seed, limits), worker, path, args)
    except (SandboxUnavailable, WorkerFailed) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _grade_file(grader, worker, path: Path, args) -> int:
    from . import results

    result = grader.grade_path(worker, path, str(path))
    if args.format == "json":
        sys.stdout.write(results.to_json([result], single=True))
    elif args.format == "gradescope":
        import json

        sys.stdout.write(json.dumps(results.to_gradescope(result), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(results.to_text(result, colour=_colour()))
    return 0


def _grade_folder(grader, folder: Path, args) -> int:
    import json

    from . import results
    from .submission import discover

    items = discover(folder)
    if not items:
        return _fail(f"{folder}: no .py or .ipynb submissions found")
    out = args.out or Path("qkv-results")
    for made, what in ((out, "results"), (args.report, "report")):
        try:
            if made is not None:
                made.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return _fail(f"{made}: cannot create the {what} folder ({exc.strerror})")
    progress = _Progress(len(items))
    graded = grader.grade_many(items, jobs=args.jobs, progress=progress.update)
    progress.finish()
    for result in graded:
        target = out / (_safe_name(result.submission) + ".json")
        target.write_text(results.to_json([result], single=True), encoding="utf-8")
    (out / "summary.csv").write_text(results.to_csv(graded), encoding="utf-8")
    if args.report is not None:
        from .report import write

        page = write(graded, args.report)
    if args.format == "json":
        sys.stdout.write(results.to_json(graded, single=False))
    elif args.format == "gradescope":
        sys.stdout.write(json.dumps([results.to_gradescope(r) for r in graded], indent=2, ensure_ascii=False) + "\n")
    else:
        width = max(len(r.submission) for r in graded)
        for result in graded:
            flags = sorted({code for step in result.steps for code in step.diagnoses})
            sys.stdout.write(f"{result.submission:<{width}}  {result.score:>6g} / {result.max_score:g}"
                             + (f"  {', '.join(flags)}" if flags else "") + "\n")
        sys.stdout.write(f"\n{len(graded)} submissions graded with seed {grader.seed}; "
                         f"results in {out}/ (one JSON each, summary.csv)"
                         + (f"; class report in {page}" if args.report is not None else "") + ".\n")
    return 0


def _gradescope_bundle(args) -> int:
    from .gradescope import BundleError, build

    if args.path is not None:
        return _fail("--gradescope-bundle builds the autograder zip and takes no PATH")
    if args.timeout <= 0:
        return _fail("--timeout must be positive")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    target: Path = args.gradescope_bundle
    try:
        config = build(target, seed, args.timeout)
    except BundleError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{target}: cannot write the bundle ({exc.strerror})")
    sys.stdout.write(f"{target}: Gradescope autograder (hidden cases from seed {seed}, {args.timeout:g} s per "
                     f"call, Python {config['python_minimum']} or newer). Upload it on the assignment's "
                     "Configure Autograder page.\n")
    return 0


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.replace(os.sep, "__"))


class _Progress:
    """A one-line progress bar on stderr, shown only on a terminal."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        self.enabled = sys.stderr.isatty()

    def update(self, _result) -> None:
        self.done += 1
        if self.enabled:
            filled = int(30 * self.done / self.total)
            sys.stderr.write(f"\rgrading [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}")
            sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    sys.stderr.write(f"qkv-grade: error: {message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
