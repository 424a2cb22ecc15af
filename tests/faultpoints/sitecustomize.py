"""Fault points for tests/test_fault_instants.py, loaded only where a test puts this folder on
PYTHONPATH: Python imports `sitecustomize` at start-up, before any of the grader's code.

QKV_FAULT="CALL:WHEN:PATTERN:COUNT:ACTION" (several joined by ";") acts at the COUNT-th call of CALL whose path matches
PATTERN (fnmatch, on the destination of a rename, the file of an fsync):

- CALL: rename, replace (os.rename, os.replace), fsync (os.fsync), exchange (the grader's swap of
  two folders; its PATTERN is matched against the folder in autograded/), commit (the gradebook's
  one commit in a run; PATTERN is ignored);
- WHEN: before or after the call;
- ACTION: kill (SIGKILL, the process gets no say), enospc (the call fails as on a full disk), or
  refuse (for exchange: answer as a file system without RENAME_EXCHANGE would, every time).

Only the qkv-grade process (run as `python -m autograder.cli`) is armed; nothing else it starts
loads this file (the grading workers run Python with -I -S).
"""
import errno
import fnmatch
import importlib.abc
import importlib.machinery
import os
import signal
import sys

_SPEC = os.environ.get("QKV_FAULT", "")
_FAULTS = [fault.split(":") for fault in _SPEC.split(";") if fault]
_seen = [0] * len(_FAULTS)


def _armed() -> bool:
    return bool(_SPEC) and bool(sys.argv) and sys.argv[0].endswith(os.path.join("autograder", "cli.py"))


def _act(action: str, path: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def _hit(call: str, path) -> tuple[bool, str, str]:
    """(whether this call is one to act on, when, action)."""
    if not _armed():
        return False, "", ""
    for number, (name, when, pattern, count, action) in enumerate(_FAULTS):
        if name != call or (call != "commit" and not fnmatch.fnmatch(os.fsdecode(path), pattern)):
            continue
        if action == "refuse":
            return True, when, action
        _seen[number] += 1
        if _seen[number] == int(count):
            return True, when, action
    return False, "", ""


def _wrap(call: str, function, path_of):
    def wrapper(*args, **kwargs):
        hit, when, action = _hit(call, path_of(*args))
        if hit and action == "refuse":
            return False
        if hit and when == "before":
            _act(action, os.fsdecode(path_of(*args)))
        result = function(*args, **kwargs)
        if hit and when == "after":
            _act(action, os.fsdecode(path_of(*args)))
        return result
    return wrapper


def _fd_path(descriptor, *_):
    try:
        return os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return ""


if _SPEC:
    os.rename = _wrap("rename", os.rename, lambda source, target, *_: target)
    os.replace = _wrap("replace", os.replace, lambda source, target, *_: target)
    os.fsync = _wrap("fsync", os.fsync, _fd_path)

    class _Patch(importlib.abc.MetaPathFinder):
        """Wraps the grader's swap and commit once its module is loaded."""

        def find_spec(self, name, path, target=None):
            if name != "autograder.nbgrader_trusted":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                return None
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                module._exchange = _wrap("exchange", module._exchange, lambda first, second: second)
                writer = module.GradebookWriter
                writer.commit = _wrap("commit", writer.commit, lambda self: "")
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Patch())
