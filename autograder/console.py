"""What the commands share about the console: UTF-8 output, exit statuses, the --seed option, an
argument parser whose errors are one line, Ctrl-C held back while modules load, and PATH reaching
this interpreter's own tools.

`qkv-grade` (cli.py), `qkv-grade --nbgrader` (nbgrader_trusted.py), `qkv-course`
(nbgrader_course.py) and Gradescope's run_autograder (gradescope.py) take these from here rather
than from one another. Standard library only, and nothing slow to load: every command imports this
before it answers, and the grader's start-up time is measured.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import sysconfig

EXIT_USAGE = 2
"""A bad invocation, or the grader could not start."""
EXIT_UNWRITTEN = 3
"""Grading finished, but its results (or report) could not all be written; every grade is on stdout."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: the shell's status for a command ended by SIGINT."""

MAX_SEED = 2**63
"""Seeds are 0 up to this (numpy takes no negative one): what a JSON reader holds exactly, too."""


def seed_option(text: str) -> int:
    """A --seed value, for argparse: a whole number from 0 to MAX_SEED - 1."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= seed < MAX_SEED:
        raise argparse.ArgumentTypeError(f"{seed} is out of range: a seed is a whole number from 0 to 2**63 - 1")
    return seed


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as every other failure of the command's is:
    the usage block is for --help."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def speak_utf8() -> None:
    """Write stdout and stderr in UTF-8 whatever the locale (LC_ALL=C included): the JSON views
    are UTF-8 by definition, and feedback quotes the chapter's √d_k. A lone surrogate, which no
    UTF-8 text can hold, is written as its escape rather than ending the run. A stream the
    command was started without (`>&-`: Python then has None) writes to /dev/null instead, so
    the run still ends with its own status."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")


def interrupt(number, frame) -> None:
    """Ctrl-C as KeyboardInterrupt (signal.default_int_handler), except where Python would print it
    and drop it: in a weak reference's callback or a finalizer, which the garbage collector may be
    running when the signal lands. There the signal is sent again a moment later, to land outside it."""
    code = getattr(frame, "f_code", None)
    if code is not None and (code.co_name == "__del__" or code.co_filename.endswith(("weakref.py", "_weakrefset.py"))):
        import threading

        again = threading.Timer(0.01, os.kill, (os.getpid(), number))
        again.daemon = True
        again.start()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred():
    """Hold back Ctrl-C (and SIGTERM) until the block is done, then raise KeyboardInterrupt.

    For the imports: an interrupt that lands inside numpy's own import surfaces as an ImportError
    with a page of advice, not as an interrupt.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {number: signal.signal(number, lambda number, _: caught.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if caught:
        raise KeyboardInterrupt


def use_own_tools() -> None:
    """Put this interpreter's scripts folder first on PATH.

    nbgrader starts `alembic` (and Jupyter its kernels) by name. Run as `.venv/bin/qkv-grade`
    without activating the venv, PATH would not reach them, or would reach another install's.
    """
    own = [folder for folder in dict.fromkeys((sysconfig.get_path("scripts"), os.path.dirname(sys.executable)))
           if folder]
    rest = [entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep) if entry not in own]
    os.environ["PATH"] = os.pathsep.join(own + rest)


MOST_CALL_SECONDS = 3600.0
"""The longest --timeout: one call's limit, which the worker's deadlines add up call by call."""


def timeout_problem(seconds: float) -> str:
    """What is wrong with a per-call time limit, or "" (NaN and infinity included)."""
    if not seconds == seconds or seconds <= 0:
        return "it must be a positive number of seconds"
    if seconds > MOST_CALL_SECONDS:
        return f"it must be at most {MOST_CALL_SECONDS:g} seconds"
    return ""
