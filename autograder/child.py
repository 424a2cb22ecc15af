"""The worker that runs submissions, and the wire format it shares with the judge.

The judge starts one worker per core (inside the sandbox, see `sandbox.py`). The worker imports
numpy once, then, for each job it is sent, forks a child that executes the submission's source and
makes the planned calls. Only plain data comes back: arrays as raw bytes with a dtype and shape,
and numbers, bools, lists, tuples, dicts and None as JSON. Anything else is reported by its type
name and never reaches the judge as an object.

The worker enforces the time limits because it is the only process that can see the child: it
relays each result, kills a child that runs past its limit or dies, and forks a fresh child (a
fresh import of the submission) for the next step.

This file must import nothing but the standard library and numpy: it runs as `python -c` inside a
sandbox that holds no other part of the grader.
"""
import json
import os
import struct
import sys

_HEADER = struct.Struct("!II")  # JSON length, blob length
MAX_MESSAGE = 256 * 1024 * 1024
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_ITEMS = 100_000
MAX_DEPTH = 6

# ---------------------------------------------------------------- framing (both sides) --------


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    """Read one frame: returns (header bytes + payload bytes) as one buffer, and its parts."""
    head = _read_exact(fd, _HEADER.size)
    json_len, blob_len = _HEADER.unpack(head)
    if json_len + blob_len > MAX_MESSAGE:
        raise ValueError("message too large")
    body = _read_exact(fd, json_len + blob_len)
    return head + body, json.loads(body[:json_len]), body[json_len:]


def write_frame(fd, obj, blob=b""):
    write_raw_frame(fd, json.dumps(obj, separators=(",", ":")).encode(), blob)


def write_raw_frame(fd, data, blob=b""):
    _write_all(fd, _HEADER.pack(len(data), len(blob)) + data + blob)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------- values (both sides) ---------


def encode(value, blobs, sizes):
    """Describe `value` as JSON-able plain data, appending array bytes to `blobs`.

    Exact types only: a subclass of ndarray, list or dict, or any other object, is described by its
    type name, so nothing the submission defines can pretend to be a number.
    """
    import numpy as np

    kind = type(value)
    if kind is np.ndarray:
        if value.dtype.kind not in "biuf":
            return {"t": "bad", "type": "numpy array of dtype %s" % value.dtype}
        if value.nbytes > MAX_VALUE_BYTES - sizes[0]:
            return {"t": "bad", "type": "numpy array of %d bytes (too large)" % value.nbytes}
        data = np.ascontiguousarray(value).tobytes()
        blobs.append(data)
        sizes[0] += len(data)
        return {"t": "array", "dtype": value.dtype.str, "shape": list(value.shape), "n": len(data)}
    if isinstance(value, np.ndarray):
        return {"t": "bad", "type": "%s (a subclass of numpy.ndarray)" % _type_name(value)}
    if kind is bool or kind is np.bool_:
        return {"t": "bool", "v": bool(value)}
    if kind is int or (isinstance(value, np.integer) and kind.__module__ == "numpy"):
        return {"t": "int", "v": int(value)} if abs(int(value)) < 2**63 else {"t": "float", "v": float(value)}
    if kind is float or (isinstance(value, np.floating) and kind.__module__ == "numpy"):
        return {"t": "float", "v": float(value)}
    if value is None:
        return {"t": "none"}
    if kind is list or kind is tuple:
        if len(value) > MAX_ITEMS or sizes[1] > MAX_DEPTH:
            return {"t": "bad", "type": "%s nested too deep or too long" % kind.__name__}
        sizes[1] += 1
        items = [encode(item, blobs, sizes) for item in value]
        sizes[1] -= 1
        return {"t": kind.__name__, "items": items}
    if kind is dict:
        if len(value) > 100 or sizes[1] > MAX_DEPTH or any(type(key) is not str for key in value):
            return {"t": "bad", "type": "dict with keys that are not plain strings"}
        sizes[1] += 1
        items = {key: encode(item, blobs, sizes) for key, item in value.items()}
        sizes[1] -= 1
        return {"t": "dict", "items": items}
    return {"t": "bad", "type": _type_name(value)}


def _type_name(value):
    kind = type(value)
    module = kind.__module__
    return kind.__name__ if module in ("builtins", "attention_head") else "%s.%s" % (module, kind.__name__)


class Bad:
    """A returned object the judge will not compare: it is only known by its type name."""

    __slots__ = ("type",)

    def __init__(self, type_name):
        self.type = type_name

    def __repr__(self):
        return "<%s>" % self.type


_DTYPES = {"<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1",
           ">f8", ">f4", ">i8", ">i4"}


def decode(obj, blob, offset=None):
    """Turn encoded plain data back into values, trusting nothing about it."""
    import numpy as np

    offset = offset if offset is not None else [0]
    kind = obj.get("t") if isinstance(obj, dict) else None
    if kind == "array":
        dtype, shape, n = obj["dtype"], obj["shape"], obj["n"]
        if dtype not in _DTYPES or not isinstance(shape, list) or len(shape) > 32:
            return Bad("array with an unsupported dtype")
        if not all(isinstance(size, int) and size >= 0 for size in shape):
            return Bad("array with an invalid shape")
        count = 1
        for size in shape:
            count *= size
        if count * np.dtype(dtype).itemsize != n or offset[0] + n > len(blob):
            return Bad("array whose data does not match its shape")
        array = np.frombuffer(blob, dtype=dtype, count=count, offset=offset[0]).reshape(shape).copy()
        offset[0] += n
        return array
    if kind == "bool":
        return bool(obj["v"])
    if kind == "int":
        return int(obj["v"])
    if kind == "float":
        return float(obj["v"])
    if kind == "none":
        return None
    if kind in ("list", "tuple"):
        items = [decode(item, blob, offset) for item in obj["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {str(key): decode(item, blob, offset) for key, item in obj["items"].items()}
    return Bad(str(obj.get("type", "unknown object")) if isinstance(obj, dict) else "unknown object")


# ---------------------------------------------------------------- the child -------------------


class ExitCalled(BaseException):
    """Raised in place of exit(), sys.exit() and os._exit() inside a submission."""


def _fake_exit(*_args, **_kwargs):
    raise ExitCalled()


class _CappedText:
    """Stands in for sys.stdout and sys.stderr: keeps the first `cap` characters, counts the rest."""

    def __init__(self, cap):
        self.cap, self.kept, self.total = cap, [], 0

    def write(self, text):
        text = str(text)
        room = self.cap - sum(len(part) for part in self.kept) if self.total < self.cap else 0
        if room > 0:
            self.kept.append(text[:room])
        self.total += len(text)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    def take(self):
        text = "".join(self.kept)
        if self.total > len(text):
            text += "\n… (%d more characters not kept)" % (self.total - len(text))
        self.kept, self.total = [], 0
        return text


def _where(exc, filename):
    """The last line of the submission's own code that the exception passed through."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(filename):
            line = "%s line %d, in %s" % (filename, tb.tb_lineno, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return line


def _raised(exc, filename):
    message = str(exc)
    if len(message) > 300:
        message = message[:300] + "…"
    return {"type": type(exc).__name__, "message": message, "where": _where(exc, filename)}


class CallTimeout(BaseException):
    """Raised by the alarm when one call runs past its time limit."""


def _on_alarm(_signum, _frame):
    raise CallTimeout()


def _child_main(job, start, out):
    import builtins
    import resource
    import signal

    import numpy as np

    limits = job["limits"]
    for name, value in (("RLIMIT_AS", limits["memory"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_FSIZE", 16 * 1024 * 1024)):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    captured = _CappedText(limits["output"])
    sys.stdout = sys.stderr = captured
    os._exit = sys.exit = builtins.exit = builtins.quit = _fake_exit
    signal.signal(signal.SIGALRM, _on_alarm)

    # The judge's own helpers, bound before the submission can touch numpy or builtins.
    ndarray, real_exit = np.ndarray, __import__("posix")._exit
    setitimer, timer = signal.setitimer, signal.ITIMER_REAL
    saved_builtins = dict(builtins.__dict__)
    call_timeout = limits["call_timeout"]

    def restore_builtins():
        """Undo any patching of builtins, so this file's own code keeps working."""
        current = builtins.__dict__
        if current != saved_builtins:
            current.clear()
            current.update(saved_builtins)

    filename = job["filename"]
    pending = []  # frames of the current step, written together when the step ends

    def send(obj, data=b""):
        obj["out"] = captured.take()
        body = json.dumps(obj, separators=(",", ":")).encode()
        pending.append(_HEADER.pack(len(body), len(data)) + body + data)

    def flush():
        if pending:
            _write_all(out, b"".join(pending))
            pending.clear()

    module = type(sys)("attention_head")
    module.__file__ = filename
    sys.modules["attention_head"] = module
    # A module runs as one piece; a notebook cell by cell, as Jupyter does: an error or an exit in
    # one cell ends that cell only, and the next cell still runs.
    notebook = filename.endswith(".ipynb")
    try:
        for index, cell in enumerate(job["cells"]):
            code = compile(cell, "%s, cell %d" % (filename, index + 1) if notebook else filename, "exec")
            try:
                exec(code, module.__dict__)
            except (Exception, ExitCalled, SystemExit):
                if not notebook:
                    raise
    except ExitCalled:
        restore_builtins()
        send({"ev": "imported", "ok": False, "error": {"type": "ExitCalled", "message": "", "where": None}})
        flush()
        real_exit(0)
    except BaseException as exc:  # a module that cannot be imported: report it, plainly
        restore_builtins()
        send({"ev": "imported", "ok": False, "error": _raised(exc, filename)})
        flush()
        real_exit(0)
    restore_builtins()
    answers = {}
    for name in job.get("answers", ()):
        text = module.__dict__.get(name)
        answers[name] = type(text) is str and bool(text.strip())
    send({"ev": "imported", "ok": True, "answers": answers})
    flush()

    for step_index in range(start, len(job["plan"])):
        step = job["plan"][step_index]
        results, blobs = [], []  # the step's results travel together, in one frame

        def send_step():
            if results:
                send({"ev": "step", "step": step_index, "results": results}, b"".join(blobs))

        for call_index, call in enumerate(step["calls"]):
            function = getattr(module, call["fn"], None)
            if not callable(function):
                results.append({"call": call_index, "out": "",
                                "raised": {"type": "MissingName", "message": call["fn"], "where": None}})
                continue
            # This child's own copy-on-write view of the worker's decoded arguments: whatever the
            # submission does to them stays in this child, and `before` still holds the originals.
            args, before = job["decoded"][step_index][call_index]
            args = list(args)
            failure = None
            try:
                setitimer(timer, call_timeout)
                try:
                    value = function(*args)
                finally:
                    setitimer(timer, 0)
            except BaseException as exc:
                failure = exc
            restore_builtins()
            if failure is not None:
                kind = ("timeout" if isinstance(failure, CallTimeout) else
                        "exit" if isinstance(failure, (ExitCalled, SystemExit)) else
                        "memory" if isinstance(failure, MemoryError) else None)
                if kind:  # the step ends here; the worker starts a fresh child for the next one
                    send_step()
                    send({"ev": "fault", "step": step_index, "call": call_index, "kind": kind})
                    flush()
                    real_exit(0)
                results.append({"call": call_index, "out": captured.take(), "raised": _raised(failure, filename)})
                continue
            mutated = [i for i, (arg, kept) in enumerate(zip(args, before)) if kept is not None and not (
                type(arg) is ndarray and (arg.shape, arg.dtype) == kept[:2] and arg.tobytes() == kept[2])]
            try:
                parts = []
                obj = encode(value, parts, [0, 0])
            except BaseException:
                obj, parts = {"t": "bad", "type": "an object that could not be read"}, []
            blobs.extend(parts)
            results.append({"call": call_index, "out": captured.take(), "value": obj, "mutated": mutated})
        send_step()
        flush()
    send({"ev": "end"})
    flush()
    real_exit(0)


# ---------------------------------------------------------------- the worker ------------------


def _kill_group(pid):
    import signal

    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass


def _reap(pid):
    """Wait for the child; returns 'exit' for a process that exited, 'crashed' for a signal."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        import signal

        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "signal %d" % number
        return "crashed", name
    return "exit", "exit status %d" % os.WEXITSTATUS(status)


def _step_budget(job, step):
    """How long the worker waits for a step's results: every call's limit, plus a margin.

    The child's own alarm enforces the limit per call; this catches a child that blocks the alarm.
    """
    limits = job["limits"]
    return limits["call_timeout"] * len(job["plan"][step]["calls"]) + 1.0


def _run_job(job, out, own_pid_namespace):
    import select

    limits = job["limits"]
    plan = job["plan"]
    start = 0
    while start < len(plan):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)
                os.close(read_end)
                _child_main(job, start, write_end)
            finally:
                os._exit(70)
        os.close(write_end)
        position = None  # None while importing; then (step, call) of the last result seen
        waiting_for = None  # the step whose results are awaited
        timeout = limits["import_timeout"]
        restart_at = None
        kind = detail = None
        while True:
            ready, _, _ = select.select([read_end], [], [], timeout)
            if not ready:
                _kill_group(pid)
                _reap(pid)
                kind = "timeout"
                break
            frames = []
            finished = failed = False
            try:
                while True:  # read every frame already waiting, then forward them in one write
                    frame, obj, _ = read_frame(read_end)
                    frames.append(frame)
                    event = obj.get("ev")
                    if event == "imported":
                        if not obj.get("ok"):
                            finished = True
                            break
                        position = (start, -1)
                    elif event == "fault":
                        position = (obj["step"], obj["call"])
                        restart_at = obj["step"] + 1
                        finished = True
                        break
                    elif event == "step" and obj.get("results"):
                        position = (obj["step"], obj["results"][-1]["call"])
                    elif event == "end":
                        finished = True
                        break
                    if not select.select([read_end], [], [], 0)[0]:
                        break
            except (EOFError, ValueError, OSError):
                failed = True
            if frames:
                _write_all(out, b"".join(frames))
            if failed:
                _kill_group(pid)
                kind, detail = _reap(pid)
                break
            if finished:
                _kill_group(pid)
                _reap(pid)
                os.close(read_end)
                if restart_at is None:
                    return
                break
            step, _call = _next_call(plan, position)
            if step is None:
                timeout = limits["call_timeout"] + 1.0
            elif step != waiting_for:
                waiting_for = step
                timeout = _step_budget(job, step)
        if restart_at is None:
            os.close(read_end)
            if own_pid_namespace:
                _kill_strays()
            if position is None:  # the import itself hung or died: nothing more can run
                write_frame(out, {"ev": "fault", "step": None, "call": None, "kind": kind, "detail": detail})
                return
            step, call = _next_call(plan, position)
            if step is None:
                return
            write_frame(out, {"ev": "fault", "step": step, "call": call, "kind": kind, "detail": detail})
            restart_at = step + 1
        elif own_pid_namespace:
            _kill_strays()
        start = restart_at


def _next_call(plan, position):
    step, call = position
    while step < len(plan):
        if call + 1 < len(plan[step]["calls"]):
            return step, call + 1
        step, call = step + 1, -1
    return None, None


def _kill_strays():
    """In the sandbox's own PID namespace, end anything a submission left running."""
    import signal

    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def _clean_tmp():
    import shutil

    for entry in os.listdir("/tmp") if os.path.isdir("/tmp") else ():
        shutil.rmtree(os.path.join("/tmp", entry), ignore_errors=True)


def _decode_plan(plan, blob):
    """Every call's arguments, decoded, with the bytes of each array kept to detect changes."""
    import numpy as np

    view = memoryview(blob)
    decoded = []
    for step in plan:
        calls = []
        for call in step["calls"]:
            args = decode(call["args"], view, [call["offset"]])
            kept = [(arg.shape, arg.dtype, arg.tobytes()) if type(arg) is np.ndarray else None
                    for arg in args]
            calls.append((args, kept))
        decoded.append(calls)
    return decoded


def worker_main():
    """Serve jobs from stdin until it closes; every frame written goes to stdout."""
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    for path in config.get("path", ()):
        sys.path.insert(0, path)
    # Load everything first, then drop to the unprivileged user: outside a sandbox that user may
    # not be able to read the Python installation at all.
    import builtins, ctypes, resource, select, shutil, signal  # noqa: E401,F401
    import numpy  # loaded once here, shared by every forked child
    import numpy.fft, numpy.linalg, numpy.random  # noqa: E401,F401
    if config.get("uid") is not None:
        os.setgroups([])
        os.setgid(config["gid"])
        os.setuid(config["uid"])
        if config.get("workdir"):
            os.chdir(config["workdir"])
    try:  # a submission running as the same user must not be able to trace the worker
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        pass

    import gc

    gc.collect()
    gc.freeze()  # forked children then never touch (and so never copy) the worker's own objects
    stdin, stdout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    write_frame(stdout, {"ev": "ready", "numpy": numpy.__version__})
    plans = {}  # plan id -> (plan, its calls' arguments decoded): every submission meets the same calls
    while True:
        try:
            _, job, blob = read_frame(stdin)
        except EOFError:
            return
        if "plan" in job:
            plans.clear()
            plans[job["plan_id"]] = (job["plan"], _decode_plan(job["plan"], blob))
            gc.freeze()
        job["plan"], job["decoded"] = plans[job["plan_id"]]
        _run_job(job, stdout, config.get("own_pid_namespace", False))
        if config.get("own_pid_namespace"):  # nothing of this submission may meet the next one
            _kill_strays()
            _clean_tmp()
        write_frame(stdout, {"ev": "done"})


if __name__ == "__main__":
    worker_main()
