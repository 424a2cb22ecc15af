# Red-team prelude, put at the top of every attack submission (after the `_RT` settings line).
#
# `_RT` holds what a student who has read the grader's source could know or guess: this run's
# folder, the instructor's home, the grader's Python, the frame format. Everything the attack
# manages that it should not is printed as a line starting `QKVRT-HOLE[...]`, the one channel a
# submission is sure to have (its printed output is part of its result), so the test can name the
# hole precisely. Anything it reads that looks secret is printed too: a leak shows up in the results.
# Writes are judged from outside only (the test compares the file system before and after): inside
# a sandbox, a path that looks like the instructor's may be a private, throwaway copy.
#
# Signals go only to this run's own processes: the grader (whose argv names `_RT["run"]`), its
# descendants, and, inside a private PID namespace, whatever is visible there. Nothing here may
# touch other processes on a shared machine, even when the sandbox under test fails.
import os as _os
import sys as _sys

_HOLES = []
_FUNCTIONS = ("project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head",
              "zero_query_mixture", "is_attention_weights", "column_normalized_counterexample",
              "shifted_output", "output_change", "head_facts", "value_intervention")
"""Every name the grader calls."""


def _hole(message):
    line = "QKVRT-HOLE[%s]: %s" % (_RT["attack"], str(message)[:160])
    if line not in _HOLES and len(_HOLES) < 12:
        _HOLES.append(line)
        try:
            print(line)
        except Exception:
            pass


def _mark():
    """Name this process (everything it forks inherits the name) so leftovers can be found."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, _RT["marker"].encode(), 0, 0, 0)  # PR_SET_NAME
    except Exception:
        pass
    try:
        with open("/proc/self/comm", "w") as handle:
            handle.write(_RT["marker"])
    except Exception:
        pass


def _pids():
    try:
        return sorted(int(name) for name in _os.listdir("/proc") if name.isdigit())
    except OSError:
        return []


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
        return int(data[data.rindex(")") + 2:].split()[1])
    except Exception:
        return None


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except Exception:
        return ""


def _never_touch(pid):
    """The test runner itself, and anything that is not part of a grading run."""
    line = _cmdline(pid)
    return "pytest" in line or pid <= 1 and _RT["run"] not in line


def _private_pid_namespace():
    """True when /proc shows only a sandbox's own few processes, so `kill -1` cannot reach others."""
    pids = _pids()
    if not pids or len(pids) > 64:
        return False
    return not any(_RT["run"] in _cmdline(pid) or "pytest" in _cmdline(pid) for pid in pids)


def _ancestors():
    """Our ancestors, nearest first, up to and including the grader of this run, never beyond."""
    chain, pid = [], _os.getppid()
    while pid and pid > 1 and pid not in chain and len(chain) < 8 and not _never_touch(pid):
        chain.append(pid)
        if _RT["run"] in _cmdline(pid):
            break
        pid = _ppid(pid)
    return chain


def _run_tree():
    """Every visible process of this grading run but ourselves: its grader and their descendants."""
    pids = _pids()
    parent = {pid: _ppid(pid) for pid in pids}
    roots = {pid for pid in pids if _RT["run"] in _cmdline(pid) and "pytest" not in _cmdline(pid)}
    tree = set()
    for pid in pids:
        hop, steps = pid, 0
        while hop and steps < 64:
            if hop in roots:
                tree.add(pid)
                break
            hop, steps = parent.get(hop), steps + 1
    return sorted(tree - {_os.getpid()})


def _targets():
    """Whom a signal attack aims at: all it can see in a private namespace, else this run's tree."""
    me = _os.getpid()
    if _private_pid_namespace():
        return [pid for pid in _pids() if pid != me]
    return [pid for pid in _run_tree() if not _never_touch(pid)]


def _signal(pid, number):
    """Send a signal; report a hole when it reached a process that is not our own child."""
    try:
        _os.kill(pid, number)
    except OSError as exc:
        print("note: signal %d to %d refused (%s)" % (number, pid, exc.strerror))
        return False
    _hole("signal %d reached pid %d (%s)" % (number, pid, _cmdline(pid)[:60] or "?"))
    return True


def _digest(name, args):
    """A call's identity: the function's name and its arguments' bytes."""
    import hashlib

    parts = [name.encode()]
    for arg in args:
        if type(arg).__module__ == "numpy":
            parts += [str(arg.shape).encode(), str(arg.dtype).encode(), np.ascontiguousarray(arg).tobytes()]
        else:
            parts.append(repr(arg).encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _open_fds():
    try:
        numbers = [int(name) for name in _os.listdir("/proc/self/fd")]
    except OSError:
        numbers = list(range(1024))
    found = []
    for fd in numbers:
        try:
            _os.fstat(fd)
            found.append(fd)
        except OSError:
            pass
    return found


def _spray(data):
    """Write `data` to every open descriptor that can take it now; returns the descriptors hit."""
    import select

    hit = []
    for fd in _open_fds():
        try:
            if not select.select([], [fd], [], 0)[1]:
                continue
            _os.write(fd, data)
            hit.append(fd)
        except Exception:
            pass
    return hit


def _daemonize():
    """Double fork and setsid: returns True in the detached grandchild, False in the caller."""
    try:
        first = _os.fork()
    except OSError as exc:
        print("fork refused: %s" % exc)
        return False
    if first:
        _hole("started a process (fork)")
        try:
            _os.waitpid(first, 0)
        except OSError:
            pass
        return False
    try:
        _os.setsid()
    except OSError:
        pass
    try:
        second = _os.fork()
    except OSError:
        import posix

        posix._exit(0)
    if second:
        import posix

        posix._exit(0)
    _mark()
    return True


def _finish():
    """End a detached process for real (exit() may be replaced in a sandboxed child)."""
    import posix

    posix._exit(0)


_mark()
