"""Grading for Chapter 15: the step table, hidden cases, the isolated runner, the judge and its views."""
import os as _os
import sys as _sys


def _forget_the_working_folder() -> None:
    """`python -m autograder...` puts the folder it is started in first on sys.path, before the
    standard library: started in a student's folder, their `numpy.py` or `secrets.py` would run here,
    in the grader's own process, with its rights. This package is found without it (installed, or
    from the project's root, which stays); runpy says `-m` in argv[0] while it imports the package."""
    if not _sys.argv or _sys.argv[0] != "-m":
        return
    here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    try:
        working = _os.getcwd()
    except OSError:
        working = None
    _sys.path[:] = [entry for entry in _sys.path
                    if not (entry in ("", ".") or (working is not None and _os.path.abspath(entry) == working))
                    or _os.path.abspath(entry or ".") == here]


_forget_the_working_folder()
