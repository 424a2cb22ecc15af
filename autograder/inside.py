"""Everything that runs inside the sandbox: the worker, and the sealed process of each submission.

The grader starts one worker per core as `python -I -S inside.py CONFIG` (inside bubblewrap where
there is one, see `sandbox.py`). Only this file and `protocol.py` are in its view of the grader.

What the worker receives, on its standard input, from the grader only:
  - once per plan: every planned call as a ready frame (step, call, function name, arguments as
    raw array bytes), which the worker keeps in a mapping of its own;
  - one frame per submission: its file name, the names of the written answers to look for and the
    limits, followed by the submission's source text (never a path), which only that submission's
    own fork of the worker reads.
What the worker sends, on its standard output, to the grader only:
  - `ready` once, with numpy's version and which confinement this kernel offers;
  - per submission: `imported`, then `result` or `fault` for each planned call in order, then
    `done`; all but the results (which only ever belong to the job in hand) carry its job id. Values are plain data (arrays as dtype,
    shape and bytes); an exception is its type name, message and line in the submission.

Per submission the worker forks a process that reads the source and keeps the submission's time,
and that forks the child which seals itself before running any student code (once more after a
call that ends its process):
  - it keeps one descriptor, the write end of a pipe made for it alone (standard input and output
    become /dev/null; every other inherited descriptor is closed);
  - its working directory, HOME and TMPDIR are a scratch folder made empty for it and removed whole
    after it;
  - hard resource limits it cannot raise: address space, CPU seconds, file size, open files;
  - no new privileges; Landlock (where the kernel has it) lets it read only the standard library,
    numpy and the system's shared libraries, and write only its scratch folder, and (ABI 4+) opens
    no TCP port, (ABI 6+) signals nothing outside itself;
  - seccomp refuses it sockets, new processes and threads, exec, ptrace, reading other processes'
    memory, signals, limits, priorities or scheduling aimed at any process but itself, System V IPC
    and POSIX message queues (which outlive a process), namespaces and mounts;
  - arguments reach it as read-only arrays: writing into one fails where it happens.
The worker hands the child one call at a time, the next only once the last has answered, and keeps
time itself: each call's result must arrive within the call's limit of its hand-over, and anything that is not the next expected frame, or breaks a bound of
`protocol.py`, ends the child and becomes that call's fault. Nothing the child sends is forwarded
before it has been checked field by field against the next expected call.

This file imports only the standard library, `protocol.py` and numpy.
"""
import ctypes
import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (beside this file, in and out of the sandbox)

del sys.path[0]

NOBODY = 65534
GRACE = 0.5
"""Seconds past a call's limit before the worker ends a child that has sent nothing."""
TOLERANCE = 0.05
"""Seconds a call's result may arrive past its limit and still count: the cost of sending it."""
FILE_SIZE = 16 << 20
OPEN_FILES = 64
SCRATCH_BYTES = 64 << 20
"""Bytes a submission may keep in its scratch folder; checked from outside while it runs."""
SCRATCH_ENTRIES = 1000
DISK_POLL = 0.02

# ---------------------------------------------------------------- confinement (Linux) ---------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_MACHINE = os.uname().machine
# System call numbers: x86_64, then aarch64 (asm-generic).
_NR = {
    "x86_64": dict(socket=41, socketpair=53, connect=42, bind=49, listen=50, accept=43, accept4=288,
                   fork=57, vfork=58, execve=59, execveat=322, clone=56, clone3=435, ptrace=101,
                   process_vm_readv=310, process_vm_writev=311, kcmp=312, pidfd_open=434, pidfd_getfd=438,
                   pidfd_send_signal=424, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
                   rt_tgsigqueueinfo=297, unshare=272, setns=308, mount=165, umount2=166, pivot_root=155,
                   chroot=161, open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432,
                   fspick=433, mount_setattr=442, keyctl=250, add_key=248, request_key=249, bpf=321,
                   perf_event_open=298, userfaultfd=323, io_uring_setup=425, io_uring_enter=426,
                   io_uring_register=427, personality=135, open_by_handle_at=304, name_to_handle_at=303,
                   init_module=175, finit_module=313, delete_module=176, kexec_load=246,
                   kexec_file_load=320, syslog=103, acct=163, iopl=172, ioperm=173, modify_ldt=154,
                   shmget=29, shmat=30, shmctl=31, shmdt=67, semget=64, semop=65, semctl=66, semtimedop=220,
                   msgget=68, msgsnd=69, msgrcv=70, msgctl=71, mq_open=240, mq_unlink=241, mq_timedsend=242,
                   mq_timedreceive=243, mq_notify=244, mq_getsetattr=245, setpriority=141, ioprio_set=251,
                   migrate_pages=256, move_pages=279, process_madvise=440, process_mrelease=448,
                   prlimit64=302, sched_setparam=142, sched_setscheduler=144, sched_setaffinity=203,
                   sched_setattr=314, fallocate=285, capset=126),
    "aarch64": dict(socket=198, socketpair=199, connect=203, bind=200, listen=201, accept=202, accept4=242,
                    execve=221, execveat=281, clone=220, clone3=435, ptrace=117, process_vm_readv=270,
                    process_vm_writev=271, kcmp=272, pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424,
                    kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240,
                    unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, chroot=51, open_tree=428,
                    move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
                    keyctl=219, add_key=217, request_key=218, bpf=280, perf_event_open=241, userfaultfd=282,
                    io_uring_setup=425, io_uring_enter=426, io_uring_register=427, personality=92,
                    open_by_handle_at=265, name_to_handle_at=264, init_module=105, finit_module=273,
                    delete_module=106, kexec_load=104, kexec_file_load=294, syslog=116, acct=89,
                    shmget=194, shmctl=195, shmat=196, shmdt=197, semget=190, semctl=191, semtimedop=192,
                    semop=193, msgget=186, msgctl=187, msgrcv=188, msgsnd=189, mq_open=180, mq_unlink=181,
                    mq_timedsend=182, mq_timedreceive=183, mq_notify=184, mq_getsetattr=185, setpriority=140,
                    ioprio_set=30, migrate_pages=238, move_pages=239, process_madvise=440, process_mrelease=448,
                    prlimit64=261, sched_setparam=118, sched_setscheduler=119, sched_setaffinity=122,
                    sched_setattr=274, fallocate=47, capset=91),
}.get(_MACHINE)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(_MACHINE)
# Allowed only when the first argument names this process: by its id, or (second list) also by 0.
_SELF_ONLY = ("kill", "tkill", "tgkill")
_SELF_OR_ZERO = ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr")
_REFUSED = tuple(name for name in (_NR or {}) if name not in _SELF_ONLY + _SELF_OR_ZERO + ("clone3", "capset"))

# Landlock (include/uapi/linux/landlock.h)
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_WRITES = sum(1 << bit for bit in range(4, 13))  # remove, make (char, dir, reg, sock, fifo, block, sym)
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_ALL = 3  # bind and connect TCP
_SCOPE_ALL = 3  # abstract unix sockets and signals


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number, *args):
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def landlock_abi():
    try:
        return max(0, _libc.syscall(ctypes.c_long(_LL_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except Exception:
        return 0


def _ruleset(abi, fs, net=0, scoped=0):
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    attr = _RulesetAttr(fs, net if abi >= 4 else 0, scoped if abi >= 6 else 0)
    return _syscall(_LL_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))


def _allow(ruleset, path, access):
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            access &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = _PathBeneath(access, fd)
        _syscall(_LL_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def _read_layer(abi, paths, listable):
    """The worker's ruleset for reading: `paths` whole, `listable` folders by name only."""
    ruleset = _ruleset(abi, _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
    for path in paths:
        if os.path.exists(path):
            _allow(ruleset, path, _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
    for path in listable:
        if os.path.isdir(path):
            _allow(ruleset, path, _FS_READ_DIR)
    return ruleset


def _write_layer(abi, scratch):
    """A child's own ruleset: writes only in its scratch folder, no TCP, no signals out."""
    writes = _FS_WRITE_FILE | _FS_WRITES | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0) \
        | (_FS_IOCTL_DEV if abi >= 5 else 0)
    ruleset = _ruleset(abi, writes, _NET_ALL, _SCOPE_ALL)
    try:
        _allow(ruleset, scratch, writes)
        _allow(ruleset, os.devnull, _FS_WRITE_FILE)
        _syscall(_LL_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _seccomp(pid):
    """Install the filter: refuse the listed calls with EPERM (clone among them: no process, no
    thread), clone3 with ENOSYS (so glibc falls back to clone), and calls aimed at another process."""
    import struct

    ld, jeq, ret = 0x20, 0x15, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    program = [(ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if _MACHINE == "x86_64":  # the x32 ABI's numbers would slip past the table
        program += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, eperm)]
    for name in _REFUSED:
        program += [(jeq, 0, 1, _NR[name]), (ret, 0, 0, eperm)]
    program += [(jeq, 0, 1, _NR["clone3"]), (ret, 0, 0, enosys)]
    for name in _SELF_ONLY + _SELF_OR_ZERO:
        # the first argument's high word must be zero, and its low word this pid (or 0)
        zero = name in _SELF_OR_ZERO
        block = [(ld, 0, 0, 20), (jeq, 0, 4 if zero else 3, 0), (ld, 0, 0, 16)]
        if zero:
            block += [(jeq, 1, 0, 0)]
        block += [(jeq, 0, 1, pid), (ret, 0, 0, allow), (ret, 0, 0, eperm)]
        program += [(jeq, 0, len(block), _NR[name])] + block
    program += [(ret, 0, 0, allow)]
    code = b"".join(struct.pack("HBBI", *op) for op in program)
    buffer = ctypes.create_string_buffer(code)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp refused the filter")


def _drop_capabilities():
    """Stay uid 0 but hold no capability, now or after any exec: root's files, no root's powers."""
    last = 40
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            last = int(handle.read())
    except (OSError, ValueError):
        pass
    if _libc.prctl(28, 0xEF, 0, 0, 0) != 0:  # PR_SET_SECUREBITS: noroot, no fixup, all locked
        raise OSError(ctypes.get_errno(), "securebits")
    for cap in range(last + 1):
        _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _syscall(_NR["capset"], ctypes.byref(header), ctypes.byref(data))


class Seal:
    """What the worker prepared once so each child can seal itself in a few system calls."""

    def __init__(self, config):
        self.level = config.get("seal", "full")  # "full" or "none" (the instructor's --no-sandbox)
        self.landlock = landlock_abi() if self.level == "full" else 0
        self.seccomp = self.level == "full" and _NR is not None
        self.read_ruleset = None
        self.error = None

    def prepare(self, paths, listable):
        if self.landlock:
            try:
                self.read_ruleset = _read_layer(self.landlock, paths, listable)
            except OSError as exc:
                self.error = "Landlock refused the read rules (%s)" % exc.strerror
                self.landlock = 0

    def apply(self, scratch):
        """In the child, before any student code: no new privileges, Landlock, seccomp."""
        if self.level != "full":
            return
        if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "no_new_privs")
        if self.read_ruleset is not None:
            _syscall(_LL_RESTRICT, ctypes.c_int(self.read_ruleset), ctypes.c_uint32(0))
            os.close(self.read_ruleset)
            _write_layer(self.landlock, scratch)
        if self.seccomp:
            _seccomp(os.getpid())


# ---------------------------------------------------------------- the child -------------------


class ExitCalled(BaseException):
    """Raised in place of exit(), sys.exit() and os._exit() inside a submission."""


class CallTimeout(BaseException):
    """Raised by the alarm when one call runs past its time limit."""


def _fake_exit(*_args, **_kwargs):
    raise ExitCalled()


def _on_alarm(_signum, _frame):
    raise CallTimeout()


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
    return line[:300] if line else None


def _raised(exc, filename):
    try:
        message = str(exc)
    except BaseException:
        message = "(a message that could not be read)"
    if len(message) > 300:
        message = message[:300] + "…"
    return {"type": type(exc).__name__[:100], "message": message, "where": _where(exc, filename)}


def _seal_descriptors(keep):
    """Standard streams to /dev/null; every descriptor but `keep` closed."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _child_main(job, calls_in, out, scratch, seal, cpu_seconds):
    import builtins
    import resource
    import signal

    limits = job["limits"]
    job["arguments"].close()  # every hidden call's arguments: unmapped here, before any student code
    _seal_descriptors({calls_in, out} | ({seal.read_ruleset} if seal.read_ruleset is not None else set()))
    os.chdir(scratch)
    os.environ.clear()
    os.environ.update(HOME=scratch, TMPDIR=scratch, PATH="/usr/bin:/bin", LANG="C.UTF-8")
    if "tempfile" in sys.modules:  # the worker's own use cached its folder
        sys.modules["tempfile"].tempdir = scratch
    for name, value in (("RLIMIT_AS", limits["memory"]), ("RLIMIT_CORE", 0), ("RLIMIT_FSIZE", FILE_SIZE),
                        ("RLIMIT_NOFILE", OPEN_FILES), ("RLIMIT_CPU", cpu_seconds)):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass
    seal.apply(scratch)

    captured = _CappedText(limits["output"])
    sys.stdout = sys.stderr = captured
    os._exit = sys.exit = builtins.exit = builtins.quit = _fake_exit
    signal.signal(signal.SIGALRM, _on_alarm)

    # The child's own helpers, bound before the submission can touch builtins or modules.
    real_exit, pack, write_all, encode = __import__("posix")._exit, protocol.pack, protocol.write_all, protocol.encode
    setitimer, timer = signal.setitimer, signal.ITIMER_REAL
    saved_builtins = dict(builtins.__dict__)
    call_timeout = limits["call_timeout"]

    def restore_builtins():
        current = builtins.__dict__
        if current != saved_builtins:
            current.clear()
            current.update(saved_builtins)

    def send(obj, data=b""):
        obj["out"] = captured.take()
        write_all(out, pack(obj, data))

    filename = job["filename"]
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
        real_exit(0)
    except BaseException as exc:  # a module that cannot be imported: report it, plainly
        restore_builtins()
        send({"ev": "imported", "ok": False, "error": _raised(exc, filename)})
        real_exit(0)
    restore_builtins()
    answers = {}
    for name in job.get("answers", ()):
        text = module.__dict__.get(name)
        answers[name] = type(text) is str and bool(text.strip())
    send({"ev": "imported", "ok": True, "answers": answers})

    import numpy  # noqa: F401  (already loaded by the worker; the arguments are numpy arrays)

    read_exactly, head_size, decode = protocol.read_exactly, protocol._HEADER.size, protocol.decode
    while True:  # the worker hands over one call at a time, and only once the last one has answered
        try:
            _, json_len, blob_len = protocol._HEADER.unpack(read_exactly(calls_in, head_size))
            call = json.loads(read_exactly(calls_in, json_len))
            blob = read_exactly(calls_in, blob_len)
        except protocol.Closed:
            real_exit(0)
        step_index, call_index = call["step"], call["call"]
        where = {"ev": "result", "step": step_index, "call": call_index}
        function = getattr(module, call["fn"], None)
        if not callable(function):
            send(dict(where, raised={"type": "MissingName", "message": call["fn"], "where": None}))
            continue
        # Read-only arrays backed by immutable bytes: writing into one raises where it happens.
        args = decode(call["args"], blob)
        failure = value = None
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
                send({"ev": "fault", "step": step_index, "call": call_index, "kind": kind})
                real_exit(0)
            send(dict(where, raised=_raised(failure, filename)))
            continue
        try:
            parts = []
            obj = encode(value, parts, [0])
        except BaseException:
            obj, parts = {"t": "bad", "type": "an object that could not be read"}, []
        send(dict(where, value=obj), b"".join(parts))


# ---------------------------------------------------------------- the worker ------------------


def _reap(pid):
    """End the child and wait for it; returns ('crashed', signal name) or ('exit', status)."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "signal %d" % number
        return "crashed", name
    return "exit", "exit status %d" % os.WEXITSTATUS(status)


def _next_call(steps, position):
    """The (step, call) after `position` in the plan, or None after the last."""
    step, call = position
    while step < len(steps):
        if call + 1 < len(steps[step]):
            return step, call + 1
        step, call = step + 1, -1
    return None


def _check_child_frame(obj, blob, expected, used):
    """The frame the child sent, if it is exactly the next one expected; raises ProtocolError."""
    event = obj.get("ev")
    text = protocol.text(obj, "out", optional=True)
    if expected is None:
        if event != "imported" or type(obj.get("ok")) is not bool:
            raise protocol.ProtocolError("something other than the module's import result")
        protocol.only(obj, "ev", "ok", "error", "answers", "out")
        clean = {"ev": "imported", "ok": obj["ok"], "out": text or ""}
        if obj["ok"]:
            clean["answers"] = protocol.answers(obj.get("answers", {}))
        else:
            clean["error"] = protocol.raised(obj.get("error"))
        return clean, b""
    if expected == "end":
        if event != "end":
            raise protocol.ProtocolError("something after the last call")
        return {"ev": "end"}, b""
    step, call = expected
    if event not in ("result", "fault") or obj.get("step") != step or obj.get("call") != call \
            or type(obj.get("step")) is not int or type(obj.get("call")) is not int:
        raise protocol.ProtocolError("something other than the next call's result")
    if event == "fault":
        protocol.only(obj, "ev", "step", "call", "kind", "out")
        if obj.get("kind") not in ("timeout", "exit", "memory"):
            raise protocol.ProtocolError("a fault of unknown kind")
        return {"ev": "fault", "step": step, "call": call, "kind": obj["kind"], "out": text or ""}, b""
    protocol.only(obj, "ev", "step", "call", "value", "raised", "out")
    clean = {"ev": "result", "step": step, "call": call, "out": text or ""}
    if "raised" in obj:
        if blob:
            raise protocol.ProtocolError("bytes beside an exception")
        clean["raised"] = protocol.raised(obj["raised"])
        return clean, b""
    if protocol.check_value(obj.get("value"), len(blob)) != len(blob):
        raise protocol.ProtocolError("bytes that no value describes")
    if used[0] + len(blob) > protocol.MAX_JOB_BYTES:
        raise protocol.ProtocolError("more array data than a submission may return")
    used[0] += len(blob)
    return clean, blob


class Worker:
    def __init__(self, config, out, seal, scratch_root):
        self.config, self.out, self.seal, self.scratch_root = config, out, seal, scratch_root
        self.pending = []

    def emit(self, obj, blob=b""):
        self.pending.append(protocol.pack(obj, blob))

    def flush(self):
        if self.pending:
            protocol.write_all(self.out, b"".join(self.pending))
            self.pending.clear()

    def serve(self, job, stdin, cells_len):
        """Run one submission in a process of its own (a fork of this worker) that reads the
        submission's source and sees its results: no classmate's code or results ever pass through
        the worker, so no later child can find them in memory it inherited."""
        pid = os.fork()
        if pid == 0:
            status = 70
            try:
                job["cells"] = json.loads(protocol.read_exactly(stdin, cells_len))
                os.close(stdin)
                self.run_job(job)
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        if self.config.get("own_pid_namespace"):
            _kill_strays()
        if status != 0:  # only a fault of this file can get here: say so, then start afresh
            self.emit({"ev": "fault", "job": job["job"], "step": None, "call": None, "kind": "crashed",
                       "detail": "the grading worker failed", "out": ""})
            self.emit({"ev": "done", "job": job["job"]})
            self.flush()
            raise SystemExit(1)

    def run_job(self, job):
        steps, tag, used = job["steps"], job["job"], [0]
        start = 0
        while start is not None and start < len(steps):
            start = self.run_child(job, start, tag, used)
        self.emit({"ev": "done", "job": tag})
        self.flush()

    def run_child(self, job, start, tag, used):
        """Run the plan from step `start` in a fresh sealed child; returns where to go on, or None."""
        import shutil
        import tempfile

        limits = job["limits"]
        calls = sum(len(step) for step in job["steps"][start:])
        cpu = int(limits["import_timeout"] + calls * limits["call_timeout"] + 5)
        scratch = tempfile.mkdtemp(prefix="s", dir=self.scratch_root)
        read_end, write_end = os.pipe()
        calls_in, calls_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                os.close(calls_out)
                _child_main(job, calls_in, write_end, scratch, self.seal, cpu)
            finally:
                os._exit(70)
        os.close(write_end)
        os.close(calls_in)
        try:
            return self.supervise(job, start, tag, used, pid, read_end, calls_out, scratch)
        finally:
            os.close(read_end)
            try:
                os.close(calls_out)
            except OSError:
                pass
            shutil.rmtree(scratch, ignore_errors=True)

    @staticmethod
    def read_watching(reader, deadline, scratch):
        """The child's next frame; meanwhile, and with every frame, its scratch folder must stay
        within its quota."""
        while True:
            wake = min(deadline, time.monotonic() + DISK_POLL)
            try:
                frame = reader.read(wake)
            except protocol.TimedOut:
                if time.monotonic() >= deadline:
                    raise
                frame = None
            if _over_quota(scratch):
                raise OverQuota("it wrote more than %d MiB or %d files" % (SCRATCH_BYTES >> 20, SCRATCH_ENTRIES))
            if frame is not None:
                return frame

    def supervise(self, job, start, tag, used, pid, read_end, calls_out, scratch):
        limits, steps, arguments = job["limits"], job["steps"], job["arguments"]
        reader = protocol.Reader(read_end)
        expected = None  # None: the import result; then (step, call); then "end"
        deadline = time.monotonic() + limits["import_timeout"]
        sent = None  # when the expected call was handed over
        while True:
            try:
                obj, blob = self.read_watching(reader, deadline, scratch)
                now = time.monotonic()
                if sent is not None and now - sent > limits["call_timeout"] + TOLERANCE:
                    raise protocol.TimedOut("the call ran past its limit")
                clean, blob = _check_child_frame(obj, blob, expected, used)
            except protocol.ProtocolError as exc:
                ended = _reap(pid)
                kind, detail = (("timeout", None) if isinstance(exc, protocol.TimedOut) else
                                ("disk", str(exc)) if isinstance(exc, OverQuota) else
                                ended if isinstance(exc, protocol.Closed) else ("protocol", str(exc)))
                position = expected if isinstance(expected, tuple) else (None, None)
                if expected == "end":
                    self.flush()
                    return None
                self.emit({"ev": "fault", "job": tag, "step": position[0], "call": position[1],
                           "kind": kind, "detail": detail, "out": ""})
                self.flush()
                return None if position[0] is None else position[0] + 1
            event = clean["ev"]
            if event == "result":  # checked field by field above: passed on as it came
                self.pending.append(reader.raw)
            else:
                clean["job"] = tag
                self.emit(clean, blob)
            if event == "fault":
                _reap(pid)
                self.flush()
                return clean["step"] + 1
            if event == "imported" and not clean["ok"]:
                _reap(pid)
                self.flush()
                return None
            expected = _next_call(steps, (start, -1) if event == "imported" else expected)
            if expected is None:  # every call answered: the child has nothing more to do
                _reap(pid)
                self.flush()
                return None
            offset, length = steps[expected[0]][expected[1]]
            try:
                protocol.write_all(calls_out, memoryview(arguments)[offset:offset + length])
            except OSError:
                pass  # the child is gone: its read end tells the rest
            sent = time.monotonic()
            deadline = sent + limits["call_timeout"] + GRACE
            self.flush()  # while the child works on the call


class OverQuota(protocol.ProtocolError):
    """The child's scratch folder outgrew its quota."""


def _over_quota(scratch):
    """Does the scratch folder hold more than its quota? Stops counting at the first excess."""
    size, entries, folders = 0, 0, [scratch]
    while folders:
        try:
            with os.scandir(folders.pop()) as found:
                for entry in found:
                    entries += 1
                    if entries > SCRATCH_ENTRIES:
                        return True
                    info = entry.stat(follow_symlinks=False)
                    size += info.st_blocks * 512
                    if size > SCRATCH_BYTES:
                        return True
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
        except OSError:
            pass
    return False


def _kill_strays():
    """In the sandbox's own PID namespace, end anything left running (belt and braces: a child
    cannot start processes)."""
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


def _load_numpy(folder):
    """Import numpy from its own folder only: nothing else beside it becomes importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("numpy", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["numpy"] = module
    spec.loader.exec_module(module)
    import numpy.fft, numpy.linalg, numpy.random  # noqa: E401,F401
    return module


def _readable(numpy_dir):
    """What a child may read: the standard library (without site-packages), numpy, shared libraries."""
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    paths = [os.path.join(stdlib, name) for name in os.listdir(stdlib)
             if name not in ("site-packages", "dist-packages")]
    platstdlib = os.path.realpath(sysconfig.get_paths()["platstdlib"])
    if platstdlib != stdlib:
        paths += [os.path.join(platstdlib, name) for name in os.listdir(platstdlib)
                  if name not in ("site-packages", "dist-packages")]
    paths += [numpy_dir, numpy_dir.rstrip("/") + ".libs"]
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for folder in ("/lib", "/usr/lib", "/lib64", "/usr/lib64"):
        paths.append(os.path.join(folder, multiarch) if multiarch and folder.endswith("lib") else folder)
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and os.path.isdir(libdir):
        paths += [os.path.join(libdir, name) for name in os.listdir(libdir) if name.startswith("libpython")]
    paths += ["/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/usr/share/zoneinfo"]
    return sorted({os.path.realpath(path) for path in paths}), sorted({stdlib, platstdlib})


def _nobody_can_read(paths):
    """Can uid 65534 read these? Asked in a throwaway child, so the worker keeps its own identity."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            for path in paths:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    with open(path, "rb") as handle:
                        handle.read(1)
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


def _drop_privileges(config, probe):
    """Never run a submission as root: become nobody, or (where nobody cannot even read Python)
    stay uid 0 with every capability gone."""
    wanted = config.get("user")
    if wanted is None or os.geteuid() != 0:
        return "same"
    if wanted == "nobody" or _nobody_can_read(probe):
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        return "nobody"
    _drop_capabilities()
    return "root without capabilities"


def _probe_seal(seal, scratch_root):
    """Seal a throwaway child once, so a kernel that refuses is known before any submission."""
    import tempfile

    scratch = tempfile.mkdtemp(prefix="probe", dir=scratch_root)
    pid = os.fork()
    if pid == 0:
        try:
            _seal_descriptors({seal.read_ruleset} if seal.read_ruleset is not None else set())
            seal.apply(scratch)
            os._exit(0)
        except BaseException:
            os._exit(1)
    ok = os.waitpid(pid, 0)[1] == 0
    os.rmdir(scratch)
    return ok


def main():
    import signal
    import tempfile

    config = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader ends workers itself
    numpy = _load_numpy(config["numpy"])
    readable, listable = _readable(config["numpy"])
    user = _drop_privileges(config, [os.__file__, os.path.join(config["numpy"], "__init__.py")])
    try:  # nothing of the same user may trace the worker or read its memory
        _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        pass
    scratch_root = tempfile.mkdtemp(prefix="qkv-scratch-")
    seal = Seal(config)
    seal.prepare(readable + [scratch_root], listable)
    sealed = _probe_seal(seal, scratch_root) if seal.level == "full" else True

    gc.collect()
    gc.freeze()  # forked children then never touch (and so never copy) the worker's own objects
    stdin, stdout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    protocol.write_all(stdout, protocol.pack({
        "ev": "ready", "numpy": numpy.__version__, "landlock": seal.landlock, "seccomp": seal.seccomp,
        "sealed": sealed, "user": user, "scratch": scratch_root, "problem": seal.error}))
    worker = Worker(config, stdout, seal, scratch_root)
    plans = {}  # plan id -> (per step, each call's place), and every call's frame in a mapping
    try:
        while True:
            try:
                head, blob_len = protocol.read_head(stdin)
            except protocol.Closed:
                return
            if "steps" in head:  # the plan is the same for every submission: the worker keeps it
                plans.clear()
                plans[head["plan_id"]] = (head["steps"], _read_mapped(stdin, blob_len))
                continue
            head["steps"], head["arguments"] = plans[head["plan_id"]]
            worker.serve(head, stdin, blob_len)
    finally:
        import shutil

        shutil.rmtree(scratch_root, ignore_errors=True)


def _read_mapped(fd, count):
    """Read `count` bytes into a mapping of their own, never into the heap: a child unmaps it
    before running student code, so no hidden call's arguments stay in memory it can read."""
    import mmap

    mapping = mmap.mmap(-1, max(count, 1))
    view, done = memoryview(mapping), 0
    while done < count:
        got = os.readv(fd, [view[done:count]])
        if not got:
            raise protocol.Closed("the channel closed")
        done += got
    view.release()
    return mapping


if __name__ == "__main__":
    main()
