"""`qkv-grade`: grade a submission, or a folder of them, with the hidden graders.

Imports stay inside functions: `qkv-grade --help` and a bad path answer without loading numpy.
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(_number, _frame):
    sys.stderr.write("qkv-grade: error: interrupted\n")
    os._exit(130)  # EXIT_INTERRUPTED, which may not be loaded yet


# Ctrl-C before `main` runs (while this module and its imports load) ends the command with its one
# line and status 130, as later; only as the command itself, never in a process that imports it.
if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "qkv-grade":
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402
import secrets  # noqa: E402
from pathlib import Path  # noqa: E402

from . import keys  # noqa: E402
from .console import (EXIT_INTERRUPTED, EXIT_UNWRITTEN, EXIT_USAGE, OneLineParser, interrupt, timeout_problem,  # noqa: E402
                      interrupts_deferred, seed_option, speak_utf8, use_own_tools)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="qkv-grade",
        description="Grade Chapter 15 attention-head submissions: a .py module, an .ipynb notebook, "
                    "or a folder of them. Exit status 0 whenever grading finished, whatever the score.")
    parser.add_argument("path", type=Path, nargs="?", default=None,
                        help="a .py or .ipynb submission, or a folder of submissions")
    parser.add_argument("--format", choices=("text", "json", "gradescope"), default="text",
                        help="text for people (default), json (the published results schema), or "
                             "Gradescope's results.json")
    parser.add_argument("--seed", type=seed_option, default=None,
                        help="seed of the hidden cases (default: a fresh one, recorded in the results)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder mode: where each run writes its own folder, run-<time>-seed<N>/, "
                             "holding one JSON result per submission and summary.csv; `latest` "
                             "points at the last one finished (default: ./qkv-results)")
    parser.add_argument("--resume", action="store_true",
                        help="folder mode: finish the newest unfinished run of this folder in --out "
                             "(same seed and time limit), grading only what it has not saved")
    parser.add_argument("--jobs", type=int, default=None, help="folder mode: parallel workers (default: one per core)")
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
    parser.add_argument("--no-carry-forward", dest="carry_forward", action="store_false",
                        help="grade every step on its own; by default a step whose only fault is an earlier "
                             "step's mistake, verified by rerunning the reference with that mistake, keeps "
                             "its points (the error carried forward)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade even where no sandbox is available (every result then records "
                             "isolation none); by default the strongest sandbox is used, or grading refuses")
    return parser


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, interrupt)  # from here, ^C is KeyboardInterrupt
    speak_utf8()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)


def _main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    use_own_tools()
    if args.no_sandbox:
        os.environ["QKV_SANDBOX"] = "none"
    from . import sandbox

    sandbox.prewarm()  # the sandbox's probe runs while the grader loads
    problem = timeout_problem(args.timeout)
    if problem:
        return _fail(f"--timeout {args.timeout:g}: {problem}")
    if args.gradescope_bundle is not None:
        return _gradescope_bundle(args)
    if args.nbgrader is not None:
        from .nbgrader_trusted import main as grade_course

        options = [f"--timeout={args.timeout}"] + [f"--{name}={value}" for name, value in
                                                    (("seed", args.seed), ("jobs", args.jobs)) if value is not None]
        options += [] if args.carry_forward else ["--no-carry-forward"]
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
    if args.report is not None:
        import importlib.util

        if not path.is_dir():
            return _fail("--report needs a folder of submissions")
        if importlib.util.find_spec("matplotlib") is None:
            return _fail("--report needs matplotlib: pip install 'qkv-attention[report]'")
    if args.out is not None and not path.is_dir():
        return _fail(f"--out keeps a folder run's results: {path} is one file, whose result is printed "
                     "(--format json prints it as JSON)")
    if args.resume and not path.is_dir():
        return _fail("--resume finishes an interrupted folder run: give that folder")
    try:
        key = keys.local_key()
    except keys.CaseKeyError as exc:
        return _fail(str(exc))

    # The grader's numpy works on arrays of a few dozen numbers: a BLAS thread per core would only
    # spin at start-up, on the cores the workers are loading on. An explicit setting is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with interrupts_deferred():
        from .runner import Limits, Worker, WorkerFailed
        from .sandbox import SandboxUnavailable

    limits = Limits(call_timeout=args.timeout)
    try:
        if path.is_dir():
            return _grade_folder(path, args, limits, key)
        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        with Worker(limits) as worker:  # picks the sandbox, or raises SandboxUnavailable
            worker.start()  # the sandbox starts and loads numpy while the grader does the same
            with interrupts_deferred():
                from . import grading, results, store  # noqa: F401 (loaded whole before any ^C can land)

            return _grade_file(grading.Grader(seed, limits, key, args.carry_forward), worker, path, args)
    except (SandboxUnavailable, WorkerFailed) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)


def _grade_file(grader, worker, path: Path, args) -> int:
    from . import results

    result = grader.grade_path(worker, path, str(path))
    if args.format == "json":
        text = results.to_json([result], single=True)
    elif args.format == "gradescope":
        text = results.dumps(results.to_gradescope(result), indent=2) + "\n"
    else:
        text = results.to_text(result, colour=_colour())
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:  # a full disk, a pipe closed early: said in a line, not a traceback
        _stdout_gone()
        return _fail(f"could not print the result ({exc.strerror or exc})", EXIT_UNWRITTEN)
    return 0


def _stdout_gone() -> None:
    """Standard output can no longer be written: what is left in its buffer goes nowhere, so that
    Python's own flush at exit raises nothing more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _grade_folder(folder: Path, args, limits, key: bytes) -> int:
    """Grade a folder into a run folder of its own (see store.py); print every grade computed,
    whatever happens to the writing."""
    with interrupts_deferred():
        from . import results, store  # noqa: F401 (loaded whole before any ^C can land)
        from .submission import discover

    try:
        found = discover(folder)
    except OSError as exc:
        return _fail(f"{exc.filename or folder}: cannot be read ({exc.strerror})")
    except Exception as exc:  # noqa: BLE001 (what the folder's files make the reading raise: said, not a traceback)
        return _fail(f"{folder}: its files changed while they were read, or hold what cannot be read "
                     f"({results.printable(f'{type(exc).__name__}: {exc}', one_line=True)[:200]}); grade it again")
    if not found.items:
        return _fail(f"{folder}: no .py or .ipynb submissions found"
                     + (f" ({len(found.skipped)} files skipped: {found.skipped[0][0]}: {found.skipped[0][1]}"
                        + (", ..." if len(found.skipped) > 1 else "") + ")" if found.skipped else ""))
    out = args.out or Path("qkv-results")
    try:
        if args.report is not None:
            store.own_folder(args.report, "report folder")
    except store.NotYours as exc:
        return _fail(str(exc), EXIT_UNWRITTEN)
    except OSError as exc:
        return _fail(f"{args.report}: cannot create the report folder ({exc.strerror})", EXIT_UNWRITTEN)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    try:
        with interrupts_deferred():  # a run folder is made (or taken over) whole, or not at all
            run = (store.Run.resume(out, folder) if args.resume
                   else store.Run.start(out, folder, seed, {"timeout": limits.call_timeout,
                                                            "key": keys.fingerprint(key),
                                                            "carry_forward": args.carry_forward}))
    except (store.RunBusy, store.NothingToResume) as exc:
        return _fail(str(exc))
    except store.NotYours as exc:
        return _fail(str(exc), EXIT_UNWRITTEN)
    except OSError as exc:
        return _fail(f"{exc.filename or out}: cannot write the results there ({exc.strerror})", EXIT_UNWRITTEN)
    if args.resume:
        if args.seed is not None and args.seed != run.seed:
            run.close()
            return _fail(f"--seed {args.seed}: the run to resume, {run.folder}, uses seed {run.seed}")
        if run.manifest["options"].get("key", keys.fingerprint(key)) != keys.fingerprint(key):
            run.close()
            return _fail(f"the run to resume, {run.folder}, was graded under another grading key "
                         f"(${keys.VARIABLE} or {keys.key_file()}); finish it with that key")
        if not args.carry_forward and run.manifest["options"].get("carry_forward", True):
            run.close()
            return _fail(f"--no-carry-forward: the run to resume, {run.folder}, carries errors forward; "
                         "finish it as it began, or start a new run")
        timeout = run.manifest["options"].get("timeout")
        if not isinstance(timeout, (int, float)) or timeout_problem(timeout):
            run.close()
            return _fail(f"the run to resume, {run.folder}, holds no usable --timeout; start a new run")
        import dataclasses

        limits = dataclasses.replace(limits, call_timeout=timeout)
        args.carry_forward = run.manifest["options"].get("carry_forward", True)  # the run's own setting
    try:
        kept = run.kept(found.items) if args.resume else {}
        run.note_files(found.items)
    except OSError as exc:
        run.close()
        return _fail(f"{exc.filename or run.folder}: cannot write the results there ({exc.strerror})", EXIT_UNWRITTEN)
    for name, document in list(kept.items()):
        try:
            kept[name] = results.from_dict(document)
        except (KeyError, TypeError, ValueError):  # not a result this grader wrote: grade it again
            del kept[name]
            run.saved.discard(name)
    saver = _Saver(run, len(found.items) - len(kept))
    failure, unprinted = None, None
    workers = []
    try:
        from .runner import Worker, default_jobs

        todo = [(path, name) for path, name in found.items if name not in kept]
        # The workers start and load numpy while the grader loads and builds the hidden cases.
        for _ in range(min(args.jobs or default_jobs(), len(todo))):
            workers.append(Worker(limits))
            workers[-1].start()
        with interrupts_deferred():
            from .grading import Grader
        if todo:
            Grader(run.seed, limits, key, args.carry_forward).grade_many(todo, progress=saver.add, workers=workers,
                                                                         keep=False)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ^C must not cut the clean-up short
        saver.stop()  # before the workers end: the grades they were computing are cut short
        failure = ("interrupted", EXIT_INTERRUPTED)
    except Exception as exc:
        from .runner import WorkerFailed
        from .sandbox import SandboxUnavailable

        if not isinstance(exc, (SandboxUnavailable, WorkerFailed)):
            raise
        failure = (str(exc), EXIT_USAGE)
    finally:
        for worker in workers:
            worker.close()
    try:  # grading is over: write and print it whole, and let a late Ctrl-C cut nothing in half
        with interrupts_deferred():
            saver.close()
            graded = _Graded(found.items, kept, saver.spool)
            if failure is None and saver.error is None:
                try:
                    run.finish(results.csv_lines(graded, found.skipped), found.skipped)
                except OSError as exc:
                    saver.error = exc
            run.close()
            page = None
            if failure is None and saver.error is None and args.report is not None:
                from .report import write

                from .store import NotYours

                try:
                    page = write(list(graded), args.report)  # the page lists every student
                except OSError as exc:
                    failure = (f"{args.report}: could not write the class report ({exc.strerror}); the results "
                               f"are in {run.folder}/", EXIT_UNWRITTEN)
                except NotYours as exc:  # changed hands since the run began
                    failure = (f"{exc}; the results are in {run.folder}/", EXIT_UNWRITTEN)
            if graded or failure is None:
                try:
                    _print_folder(graded, found, run, args, page)
                    sys.stdout.flush()
                except OSError as exc:  # a full disk, a pipe closed early: the run folder holds them
                    _stdout_gone()
                    unprinted = exc
    except KeyboardInterrupt:
        pass  # it came after the last grade: the run is complete as it stands
    if failure is not None and failure[1] == EXIT_INTERRUPTED:
        run.mark("interrupted")
        return _fail(f"interrupted: {len(run.saved)} of {len(found.items)} results are kept in {run.folder}/; "
                     f"finish the run with --resume", EXIT_INTERRUPTED)
    if failure is not None and not args.resume and not run.saved:
        run.discard()  # nothing was graded (no sandbox, say): no run folder for --resume to take up
        return _fail(failure[0], failure[1])
    if failure is not None:
        run.mark("failed")
        return _fail(failure[0], failure[1])
    if saver.error is not None:
        run.mark("could not write")
        printed = ("and every grade is printed above" if unprinted is None else
                   f"and the others could not be printed either ({unprinted.strerror or unprinted}): "
                   "grade them again with --resume once there is room")
        return _fail(f"{saver.error.filename or run.folder}: could not write the results "
                     f"({saver.error.strerror}); {len(run.saved)} of {len(found.items)} are kept in "
                     f"{run.folder}/, {printed}", EXIT_UNWRITTEN)
    if unprinted is not None:
        return _fail(f"could not print the grades ({unprinted.strerror or unprinted}); every result is kept in "
                     f"{run.folder}/", EXIT_UNWRITTEN)
    return 0


NAME_COLUMN = 40
"""The widest the listing's column of names is made: every row is padded to it."""


class _Saver:
    """Saves each result as soon as it is graded, and shows progress.

    The writing (each file flushed to disk before it counts) is done by a thread of its own, so
    the threads grading go on meanwhile. The first write that fails stops the writing (the disk is
    full, or the folder went away); grading goes on, and every grade still reaches stdout. No
    result is kept in memory: each is put in the spool, from which the summary and the listing
    are read back at the end.
    """

    def __init__(self, run, total: int):
        import queue
        import threading

        self.run, self.error = run, None
        self.spool = _Spool()
        self.progress = _Progress(total)
        self.lock, self.closed = threading.Lock(), False
        # Bounded: where the disk is slower than the grading, the grading waits for it rather than
        # holding the texts of a whole class in memory.
        self.queue: queue.Queue = queue.Queue(maxsize=256)
        self.writer = threading.Thread(target=self._write, daemon=True)
        self.writer.start()

    def add(self, result) -> None:
        from . import results

        try:  # a result that cannot be written is replaced by one saying so, for that submission alone
            text = results.to_json([result], single=True)
        except Exception as exc:
            result = results.unreadable(result.submission, f"{result.submission}: the grader could not write its "
                                        f"result ({type(exc).__name__}); this is a fault of the grader's, not of "
                                        f"the submission", result.seed, result.isolation)
            text = results.to_json([result], single=True)
        with self.lock:
            if self.closed:  # the run was interrupted: a grade its workers' ending cut short is no grade
                return
            self.spool.put(result.submission, text, result.seconds)
            self.progress.update(result)
            self.queue.put((result.submission, text))

    def _write(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.error is None:
                try:
                    self.run.save(*item)
                except OSError as exc:
                    self.error = exc

    def stop(self) -> None:
        """Take no more results; those already taken are still written."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.queue.put(None)

    def close(self) -> None:
        """No write after this one returns: the writes already queued are finished first."""
        self.stop()
        self.writer.join()
        self.progress.finish()


class _Spool:
    """The results of a run, out of the grader's memory: each one's JSON text in a temporary file
    of the grader's own (unlinked at once, so no other process can open it by name), read back
    one at a time for the summary and the listing. Where that file cannot be written (no room),
    the texts are kept in memory instead, so every grade still reaches stdout."""

    def __init__(self):
        import tempfile

        self.where: dict[str, tuple] = {}
        """name -> (offset, length, seconds) in the file, or (text, seconds) in memory."""
        try:  # unbuffered: a write that finds no room fails there, not at a later one
            self.file = tempfile.TemporaryFile(buffering=0)
        except OSError:
            self.file = None

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def put(self, name: str, text: str, seconds: float) -> None:
        data = text.encode("utf-8")
        if self.file is not None:
            try:
                offset = self.file.seek(0, 2)
                view = memoryview(data)
                while view:
                    view = view[self.file.write(view):]
                self.where[name] = (offset, len(data), seconds)
                return
            except OSError:
                self._to_memory()  # no room: every text, this one and the later ones, kept in memory
        self.where[name] = (data, seconds)

    def _to_memory(self) -> None:
        """Read back what the file holds into memory (reading needs no room), and drop the file."""
        spooled, self.file = self.file, None
        for name, place in list(self.where.items()):
            if len(place) == 3:
                offset, length, seconds = place
                spooled.seek(offset)
                self.where[name] = (spooled.read(length), seconds)
        spooled.close()

    def get(self, name: str):
        import json

        from . import results

        place = self.where.get(name)
        if place is None:
            return None
        if len(place) == 3:
            offset, length, seconds = place
            self.file.seek(offset)
            data = self.file.read(length)
        else:
            data, seconds = place
        result = results.from_dict(json.loads(data))
        result.seconds = seconds
        return result


class _Graded:
    """The graded results in the order the submissions were found, read one at a time (from the
    results a resumed run kept, or from the spool)."""

    def __init__(self, items, kept: dict, spool: _Spool):
        self.names = [name for _, name in items if name in kept or name in spool]
        self.kept, self.spool = kept, spool

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        for name in self.names:
            yield self.kept.get(name) or self.spool.get(name)


def _print_folder(graded: _Graded, found, run, args, page) -> None:
    from . import results

    write, skipped = sys.stdout.write, found.skipped
    if args.format == "json":
        for piece in results.json_lines(graded):
            write(piece)
    elif args.format == "gradescope":
        for piece in results.gradescope_lines(graded):
            write(piece)
    if args.format != "text":  # stdout is the JSON alone: what was found and not graded goes to stderr
        for name, reason in skipped:
            sys.stderr.write(f"qkv-grade: not graded: {results.printable_name(name)}: "
                             f"{results.printable(reason, one_line=True)}\n")
        for note in found.notes:
            sys.stderr.write(f"qkv-grade: note: {note}\n")
    else:
        # the names' column, as wide as the longest name up to NAME_COLUMN: a longer name (a student
        # may name a file with escapes that show as 4 characters each) runs past it on its own row
        width = min(max([len(results.printable_name(name)) for name in graded.names]
                        + [len(results.printable_name(name)) for name, _ in skipped] + [1]), NAME_COLUMN)
        for result in graded:
            flags = sorted({code for step in result.steps for code in step.diagnoses})
            write(f"{results.printable_name(result.submission):<{width}}  {result.score:>6g} / "
                  f"{result.max_score:g}" + (f"  {', '.join(flags)}" if flags else "") + "\n")
        for name, reason in skipped:
            write(f"{results.printable_name(name):<{width}}  not graded: "
                  f"{results.printable(reason, one_line=True)}\n")
        for note in found.notes:
            write(f"note: {note}\n")
        where = (f"results in {run.folder}/ (one JSON each, summary.csv)" if run.finished
                 else f"results not complete in {run.folder}/")
        write(f"\n{len(graded)} submission{'' if len(graded) == 1 else 's'} graded with seed {run.seed}; {where}"
              + (f"; class report in {page}" if page is not None else "") + ".\n")
    sys.stdout.flush()


def _gradescope_bundle(args) -> int:
    from .gradescope import BundleError, build

    if args.path is not None:
        return _fail("--gradescope-bundle builds the autograder zip and takes no PATH")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    target: Path = args.gradescope_bundle
    try:
        config = build(target, seed, args.timeout, carry_forward=args.carry_forward)
    except BundleError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{target}: cannot write the bundle ({exc.strerror})")
    sys.stdout.write(f"{target}: Gradescope autograder (hidden cases from seed {seed}, {args.timeout:g} s per "
                     f"call, {'' if config['carry_forward'] else 'no '}error carried forward, "
                     f"Python {config['python_minimum']} or newer). Upload it on the assignment's "
                     "Configure Autograder page.\n")
    return 0


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
    from .results import printable  # a message may quote a file name a student chose

    sys.stderr.write(f"qkv-grade: error: {printable(message)}\n")
    return code


def command() -> None:
    """qkv-grade as a command: `main`, then the process ends at once where nothing is left to do.

    After a class run, tearing the interpreter down object by object takes tens of milliseconds
    for nothing: every result is written, flushed and closed by then. So where no exit handler is
    registered and no other thread runs, the standard streams are flushed and the process ends
    there; otherwise, and if a stream cannot be flushed, Python ends it as usual."""
    import atexit
    import threading

    code = main()
    if getattr(atexit, "_ncallbacks", lambda: 1)() == 0 and threading.active_count() == 1:
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # None: Python was started with that stream closed
                    stream.flush()
        except (OSError, ValueError):
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    command()
