"""Everything that runs inside the sandbox: the worker, and the sealed process of each submission.

The grader starts one worker per core as `python -I -S inside.py CONFIG` (inside bubblewrap where
there is one, see `sandbox.py`). Only this file and `protocol.py` are in its view of the grader.

What the worker receives, on a channel of its own from the grader only (a descriptor above the
standard three: bubblewrap's init, which may run as the grader's user, closes those in itself):
  - once (a worker grades one plan): every planned call as a ready frame (step, call, function
    name, arguments as raw array bytes), which the worker keeps in a mapping of its own;
  - one frame per submission: its file name, the names of the written answers to look for and the
    limits, followed by the submission's source text (never a path): its cells, in marshal's
    format, which only the submission's own process decodes.
What the worker sends, on another such channel, to the grader only:
  - `ready` once, with numpy's version and which confinement this kernel offers;
  - per submission: `imported`, then `result` or `fault` for each planned call in order, then
    `done`; all but the results (which only ever belong to the job in hand) carry its job id.
A job may also ask to call some steps again ("again": per step, the names of the functions to
replace): each such step runs alone in a fresh child, which imports the submission as before and
calls that step's planned calls with those names in the module bound, for each call alone, to the
chapter's own computation (§15.6, `chapter_head.py`: the grader sends the job the functions it
names, and the worker passes them to that child alone), and bound back to
the student's after it. The grader asks this only for a failing step built on failing earlier steps, never naming the step's
own function: a step whose own work is right then passes (the error carried forward).

Right after loading numpy and the plan, before it reads any submission, the worker forks a fork
server, and every child is forked from that: no child inherits memory that ever held a
classmate's source or results. A child reads its own source from a pipe of its own, then seals
itself before running any student code (and a fresh child takes over after a call that ends its
process):
  - it keeps four descriptors, pipes made for it alone: its source, its calls, its results, and a
    bell it rings when the worker should read its results (standard input and output become
    /dev/null; every other inherited descriptor is closed);
  - it unmaps the plan's arguments: it holds only the calls handed to it;
  - its working directory, HOME and TMPDIR are a scratch folder made empty for it and removed whole
    after it;
  - hard resource limits it cannot raise: address space, CPU seconds, file size, open files, and
    no queued signals (counted per user: a classmate would see them);
  - no new privileges; Landlock (where the kernel has it) lets it read only the standard library,
    numpy and the system's shared libraries, and write only its scratch folder, and (ABI 4+) opens
    no TCP port, (ABI 6+) signals nothing outside itself;
  - seccomp refuses it sockets, new processes and threads, exec, ptrace, reading other processes'
    memory, signals, limits, priorities or scheduling aimed at any process but itself (signals the
    kernel would send on its behalf too), System V IPC and POSIX message queues (which outlive a
    process), namespaces and mounts; and what Landlock leaves open: changing a file's mode, owner,
    times, extended attributes or attribute flags (anywhere: a file it may only read is still a
    file it may own), truncating by path, and watching folders (inotify, fanotify); what would hold
    memory or disk no limit and no listing of the scratch folder counts (a file without a name:
    memfd, O_TMPFILE, renaming over a name; a pipe grown past its default size), while removing a
    name seems to succeed and leaves it, counted, until the child ends; and the kernel state a
    classmate graded at once shares (locks on files, the page cache, futexes keyed by a file,
    asynchronous I/O contexts, sysinfo, another process's scheduling state, priority or group);
  - arguments reach it as read-only arrays: writing into one fails where it happens.
The worker hands the child one step's calls at a time, the next step's only once the last call has
answered (and never waits to: a child that answered calls it never read is ended), and keeps time
itself: each call's result must arrive within the call's limit of the previous result (or of the
hand-over). A result arrives when the worker reads it: at the child's bell, or at the latest every
DISK_POLL seconds, so a child that keeps quiet only makes itself later.
Anything that is not the next expected frame, or breaks a bound of `protocol.py`, ends the child
and becomes that call's fault. A result is forwarded once its first bytes say it is the result of
the next call the child holds (within the JSON its header bounds); the grader then checks every
field, and what it refuses there is that call's fault. A result in any other form ends the child;
anything else it sends is checked field by field here first.

This file imports only the standard library, `protocol.py` and numpy.
"""
import ctypes
import fcntl
import gc
import json
import math
import os
import select
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (beside this file, in and out of the sandbox)

del sys.path[0]

NOBODY = 65534
TOLERANCE = 0.05
"""Seconds a call's result may arrive past its limit and still count: the cost of sending it. Then
the worker ends a child that has sent nothing (no alarm inside: what the child does with one is
its own business, and it would cost two system calls a call)."""
FILE_SIZE = 16 << 20
OPEN_FILES = 64
SCRATCH_BYTES = 64 << 20
"""Bytes a submission may keep in its scratch folder; checked from outside while it runs."""
SCRATCH_ENTRIES = 1000
DISK_POLL = 0.02
PENDING_BYTES = 256 << 10
PENDING_MOST = 16 << 20  # results held back, at most, while the grader reads nothing (see Worker.flush_some)
CALLS_PIPE = 1 << 16
"""Bytes of calls handed to a child at once: a pipe holds at least this much, so no write waits."""
RESULTS_PIPE = 1 << 20
"""Bytes a child's result pipe is asked to hold: a step's results fit in it with no one reading."""
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032

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
                   sched_setattr=314, fallocate=285, fcntl=72, ioctl=16, capset=126,
                   chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, chown=92, fchown=93, lchown=94,
                   fchownat=260, utime=132, utimes=235, utimensat=280, futimesat=261, setxattr=188,
                   lsetxattr=189, fsetxattr=190, removexattr=197, lremovexattr=198, fremovexattr=199,
                   setxattrat=463, removexattrat=466, truncate=76, inotify_init=253, inotify_init1=294,
                   inotify_add_watch=254, fanotify_init=300, fanotify_mark=301, file_setattr=469,
                   open_tree_attr=467, memfd_create=319, memfd_secret=447, unlink=87, unlinkat=263, rmdir=84,
                   rename=82, renameat=264, renameat2=316, flock=73, mincore=27, cachestat=451, fadvise64=221,
                   readahead=187, sysinfo=99, io_setup=206, open=2, openat=257, madvise=28, futex=202,
                   openat2=437, preadv2=327, pwritev2=328, futex_waitv=449, futex_wake=454, futex_wait=455,
                   futex_requeue=456, getpriority=140, ioprio_get=252, sched_getparam=143,
                   sched_getscheduler=145, sched_getaffinity=204, sched_rr_get_interval=148, sched_getattr=315,
                   getpgid=121, getsid=124),
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
                    sched_setattr=274, fallocate=47, fcntl=25, ioctl=29, capset=91,
                    fchmod=52, fchmodat=53, fchmodat2=452, fchown=55, fchownat=54, utimensat=88, setxattr=5,
                    lsetxattr=6, fsetxattr=7, removexattr=14, lremovexattr=15, fremovexattr=16, setxattrat=463,
                    removexattrat=466, truncate=45, inotify_init1=26, inotify_add_watch=27, fanotify_init=262,
                    fanotify_mark=263, file_setattr=469, open_tree_attr=467, memfd_create=279, memfd_secret=447,
                    unlinkat=35, renameat=38, renameat2=276, flock=32, mincore=232, cachestat=451,
                    fadvise64=223, readahead=213, sysinfo=179, io_setup=0, openat=56, madvise=233, futex=98,
                    openat2=437, preadv2=286, pwritev2=287, futex_waitv=449, futex_wake=454, futex_wait=455,
                    futex_requeue=456, getpriority=141, ioprio_get=31, sched_getparam=121,
                    sched_getscheduler=120, sched_getaffinity=123, sched_rr_get_interval=127, sched_getattr=275,
                    getpgid=155, getsid=156),
}.get(_MACHINE)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(_MACHINE)
# Allowed only when the first argument names this process: by its id, or (second list) also by 0.
_SELF_ONLY = ("kill", "tkill", "tgkill")
_SELF_OR_ZERO = ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr",
                 # and reading another process's scheduling state or group: where classmates share a
                 # PID namespace (landlock), one could set its own and the other read it
                 "sched_getparam", "sched_getscheduler", "sched_getaffinity", "sched_rr_get_interval",
                 "sched_getattr", "getpgid", "getsid")
# getpriority and ioprio_get name their process by the second argument: not in any list, refused whole.
# Refused by the value of one argument (its index, then the values): whatever makes the kernel
# signal a process on the child's behalf (a descriptor's owner, its signal, a lease, a folder
# notice) or types into a terminal; a lock on a file, which any classmate able to read it sees;
# a pipe grown past its default size; advice that moves a file's pages in or out of the page
# cache every classmate shares, or merges pages with other processes'.
_VALUES = {"fcntl": (1, (8, 10, 15, 1024, 1026,  # F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY
                         5, 6, 7, 36, 37, 38,  # F_GETLK, F_SETLK, F_SETLKW and their OFD forms
                         1031)),  # F_SETPIPE_SZ
           # FIOSETOWN, SIOCSPGRP, TIOCSTI; then a file's attribute flags and version (chattr), in
           # their long and 32-bit forms, and its extended attributes (FS_IOC_FSSETXATTR)
           "ioctl": (1, (0x8901, 0x8902, 0x5412, 0x40086602, 0x40046602, 0x40087602, 0x40047602, 0x401C5820)),
           "madvise": (2, (3, 12, 20, 21))}  # MADV_WILLNEED, MADV_MERGEABLE, MADV_COLD, MADV_PAGEOUT
# Refused when one argument has any of these bits set (its index, then the bits): a file opened
# without a name (O_TMPFILE), which neither the address-space limit nor the scratch folder's
# listing would count.
_BITS = {"open": (1, 0x400000), "openat": (2, 0x400000)}
# Allowed only with this bit set in the operation: a futex private to the process, never one keyed
# by a file that classmates map too.
_REQUIRED_BITS = {"futex": (1, 128)}  # FUTEX_PRIVATE_FLAG
# Refused with ENOSYS, so that a library falls back on the plain call: flags (openat2's, a vector
# futex's) that the filter cannot read, and preadv2/pwritev2 (RWF_NOWAIT tells whether a file's
# pages are in the shared page cache).
_MISSING = ("clone3", "openat2", "preadv2", "pwritev2", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue")
# Answered with success, and not done: a name removed from the scratch folder stays until the
# submission ends, so the listing still counts an open file's blocks, while code that removes what
# it made (the standard library's tempfile, which tries a file in its folder first) still works.
_KEPT = ("unlink", "unlinkat", "rmdir")

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


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _Seccomp:
    """The filter, built once: refuse the listed calls with EPERM (clone among them: no process, no
    thread), those that have a fallback with ENOSYS (clone3: glibc then uses clone), and calls aimed
    at another process or with a refused argument; answer removals with a success never done. A child only writes its own pid into the slots
    kept for it, and installs it.

    The filter runs at every system call, so it finds a call's rule by a binary search on its
    number (an ordinary read or write passes after 13 instructions, any call after 30 at most)
    rather than by comparing it with every rule in turn (some 170 for any call the table lacks)."""

    PID = 0xFFFFFFFF  # stands for the child's pid until `install`
    LD, JEQ, JGE, JSET, JA, RET = 0x20, 0x15, 0x35, 0x45, 0x05, 0x06
    ALLOW, KILL, EPERM, ENOSYS, KEEP = 0x7FFF0000, 0x80000000, 0x00050000 | 1, 0x00050000 | 38, 0x00050000

    def __init__(self):
        import struct

        ld, jeq, ret = self.LD, self.JEQ, self.RET
        program = [(ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH), (ret, 0, 0, self.KILL), (ld, 0, 0, 0)]
        if _MACHINE == "x86_64":  # the x32 ABI's numbers would slip past the table
            program += [(self.JGE, 0, 1, 0x40000000), (ret, 0, 0, self.EPERM)]
        # Every call in the table has a rule (most: refused); capset is there for the worker to drop
        # its own capabilities with, and a child without any has none to change.
        rules = sorted((_NR[name], self._rule(name)) for name in _NR if name != "capset")
        program += self._search(rules)
        self.pid_slots = [8 * index + 4 for index, op in enumerate(program) if op[3] == self.PID]
        self.buffer = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in program))
        self.program = _Filter(len(program), ctypes.cast(self.buffer, ctypes.c_void_p))

    def _rule(self, name):
        """What the filter does with call `name`, once its number matched: instructions that
        each end in a return."""
        ld, jeq, ret = self.LD, self.JEQ, self.RET
        if name in _MISSING:
            return [(ret, 0, 0, self.ENOSYS)]
        if name in _KEPT:
            return [(ret, 0, 0, self.KEEP)]
        if name in _SELF_ONLY + _SELF_OR_ZERO:
            # the first argument's high word must be zero, and its low word this pid (or 0)
            zero = name in _SELF_OR_ZERO
            block = [(ld, 0, 0, 20), (jeq, 0, 4 if zero else 3, 0), (ld, 0, 0, 16)]
            if zero:
                block += [(jeq, 1, 0, 0)]
            return block + [(jeq, 0, 1, self.PID), (ret, 0, 0, self.ALLOW), (ret, 0, 0, self.EPERM)]
        if name in _VALUES:  # the argument's low word
            index, values = _VALUES[name]
            block = [(ld, 0, 0, 16 + 8 * index)]
            block += [(jeq, len(values) - at, 0, value) for at, value in enumerate(values)]
            return block + [(ret, 0, 0, self.ALLOW), (ret, 0, 0, self.EPERM)]
        if name in _BITS or name in _REQUIRED_BITS:
            index, bits = _BITS.get(name) or _REQUIRED_BITS[name]
            refuse_set = name in _BITS
            return [(ld, 0, 0, 16 + 8 * index), (self.JSET, 0, 1, bits),
                    (ret, 0, 0, self.EPERM if refuse_set else self.ALLOW),
                    (ret, 0, 0, self.ALLOW if refuse_set else self.EPERM)]
        return [(ret, 0, 0, self.EPERM)]

    def _search(self, rules):
        """Instructions that find the call number (in the accumulator) among `rules`, sorted
        (number, instructions) pairs, and run its rule; any other number is allowed."""
        if len(rules) <= 3:
            code = []
            for number, block in rules:
                code += [(self.JEQ, 0, len(block), number)] + block
            return code + [(self.RET, 0, 0, self.ALLOW)]
        middle = len(rules) // 2
        below, above = self._search(rules[:middle]), self._search(rules[middle:])
        # at or above the middle number: jump over the search below it (a long jump: it may be far)
        return [(self.JGE, 0, 1, rules[middle][0]), (self.JA, 0, 0, len(below))] + below + above

    def install(self, pid):
        pid_bytes = pid.to_bytes(4, sys.byteorder)
        for slot in self.pid_slots:
            self.buffer[slot:slot + 4] = pid_bytes
        if _libc.prctl(22, 2, ctypes.byref(self.program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
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
        self.seccomp = _Seccomp() if self.level == "full" and _NR is not None else None
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
        if self.seccomp is not None:
            self.seccomp.install(os.getpid())


# ---------------------------------------------------------------- the child -------------------


class ExitCalled(BaseException):
    """Raised in place of exit(), sys.exit() and os._exit() inside a submission."""


def _version_tag(mapping):
    """A live view of dict `mapping`'s version tag, which CPython 3.11 to 3.13 change at every
    change of the dict (PEP 509), or None where this interpreter is seen to keep no such tag there."""
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        return None
    pointer = ctypes.sizeof(ctypes.c_void_p)
    try:
        probe = {"a": 1}  # after the object's header: the count of entries, then the version tag
        used, tag = (ctypes.c_ssize_t.from_address(id(probe) + 2 * pointer),
                     ctypes.c_uint64.from_address(id(probe) + 3 * pointer))
        seen = [tag.value]
        for change in (lambda: probe.__setitem__("b", 2), lambda: probe.__setitem__("b", 3),
                       lambda: probe.pop("b"), probe.clear):
            change()
            seen.append(tag.value)
        if used.value != 0 or len(set(seen)) != len(seen):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    return ctypes.c_uint64.from_address(id(mapping) + 3 * pointer)


def _fake_exit(*_args, **_kwargs):
    raise ExitCalled()


class _CappedText:
    """Stands in for sys.stdout and sys.stderr: keeps the first `cap` characters, counts the rest."""

    def __init__(self, cap):
        self.cap, self.kept, self.total = cap, [], 0

    def write(self, text):
        text = protocol.plain_text(str(text))
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
        code = tb.tb_frame.f_code
        if code.co_filename.startswith(filename):  # a notebook's cells are "name.ipynb, cell N"
            line = "%s line %d, in %s" % (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return line[:300] if line else None


def _raised(exc, filename):
    """An exception as plain data; whatever the exception's own code does, this returns."""
    try:
        kind = protocol.plain_text(type(exc).__name__, 100)
    except BaseException:
        kind = "Exception"
    try:
        message = protocol.plain_text(str(exc), 301)
    except BaseException:
        message = "(a message that could not be read)"
    try:
        where = _where(exc, filename)
        where = None if where is None else protocol.plain_text(where, 300)
    except BaseException:
        where = None
    return {"type": kind, "message": message, "where": where}


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


CHAPTER_NAMES = ("project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head")
CHAPTER_CALLS = {"attention": ("scores", "scale", "softmax_rows", "mix"), "self_attention_head": ("project_qkv", "attention")}
"""Which of the chapter's functions each calls: a stand-in reaches these, and nothing else of it."""


GRADED_FUNCTIONS = CHAPTER_NAMES + ("zero_query_mixture", "is_attention_weights", "column_normalized_counterexample",
                                    "shifted_output", "output_change", "head_facts", "value_intervention")
_LOAD_GLOBAL = __import__("opcode").opmap["LOAD_GLOBAL"]
_EXTENDED_ARG = __import__("opcode").opmap["EXTENDED_ARG"]
_GLOBAL_SHIFT = 1 if sys.version_info >= (3, 11) else 0  # 3.11 keeps a flag in the lowest bit


def _op_args(code, ops):
    """The arguments of `code`'s instructions among `ops`, read from its bytecode."""
    raw, extended = code.co_code, 0
    for at in range(0, len(raw) - 1, 2):
        op, arg = raw[at], raw[at + 1] | extended
        extended = arg << 8 if op == _EXTENDED_ARG else 0
        if op in ops:
            yield arg


def _names_used(code, ops, shift=0):
    """The names of `code.co_names` that its instructions among `ops` use, read from its bytecode
    (each argument shifted right by `shift`, where the interpreter keeps a flag in its lowest bits)."""
    return {code.co_names[arg >> shift] for arg in _op_args(code, ops) if (arg >> shift) < len(code.co_names)}


def _globals_loaded(code, depth=0):
    """The global names `code` loads (LOAD_GLOBAL, not an attribute's name), and code nested in it."""
    found = _names_used(code, (_LOAD_GLOBAL,), _GLOBAL_SHIFT)
    if depth < 3:
        for const in code.co_consts:
            if type(const) is type(code):
                found |= _globals_loaded(const, depth + 1)
    return found


def names_read_outside(namespace):
    """For each graded function of `namespace`, the names of the module's own values (not
    functions, classes, modules or text) that it, or a function of the module it calls, reads as
    globals: what stays as it is whatever arguments the function is given. Read from bytecode:
    an attribute (`x.T`) is no global. At most 8 names a function, each an identifier."""
    function_type, module_type = type(names_read_outside), type(sys)
    values = {name for name, value in namespace.items() if protocol.is_name(name)
              and not name.startswith("__") and not callable(value)
              and type(value) not in (module_type, str, bytes, type(None))}
    found = {}
    for name in GRADED_FUNCTIONS:
        todo, seen, read = [namespace.get(name)], set(), set()
        while todo and len(seen) < 20:
            function = todo.pop()
            if type(function) is not function_type or id(function) in seen:
                continue
            seen.add(id(function))
            loaded = _globals_loaded(function.__code__)
            # and a global it assigns itself (`global _root`), whatever it holds before the first
            # call (None, or nothing): state kept from one call to the next
            kept = {stored for stored in _names_used(function.__code__, (_STORE_GLOBAL,))
                    if protocol.is_name(stored) and not stored.startswith("__")}
            read |= loaded & (values | kept)
            todo += [namespace.get(other) for other in loaded if type(namespace.get(other)) is function_type]
        if read:
            found[name] = sorted(read)[:8]
    return found


_STORE_GLOBAL = __import__("opcode").opmap["STORE_GLOBAL"]
_STORES = (__import__("opcode").opmap["STORE_NAME"], _STORE_GLOBAL)
MOST_BINDINGS = 8
"""Of the cells that bound a graded name anew, the last this many are told."""


def _binds(code, source):
    """The graded functions a notebook cell binds at its top level (a def, an import, an
    assignment), read from its bytecode; where it would not compile, the names of its `def` lines."""
    if code is None:
        found = {line.lstrip()[4:].split("(")[0].strip() for line in source.splitlines()
                 if line.lstrip().startswith("def ")}
    else:
        found = _names_used(code, _STORES)
    return sorted(found & set(GRADED_FUNCTIONS))


def _note_bindings(namespace, number, held, bound, absent):
    """After notebook cell `number`: each of the notebook's names bound to something new is noted
    (`bound`, name -> cell numbers; `held`, name -> what it is bound to), for the first thousand
    names. Read without running any of the notebook's code: no key is compared, no value looked into."""
    for name, value in list(namespace.items()):
        if type(name) is not str or (name not in held and len(held) >= 1000):
            continue
        if value is not held.get(name, absent):
            held[name] = value
            bound.setdefault(name, []).append(number)


def _plain_functions(namespace):
    """(name, function) of each graded name of `namespace` bound to a function defined in Python."""
    function_type = type(_plain_functions)
    for name in GRADED_FUNCTIONS:
        function = namespace.get(name)
        if type(function) is function_type:
            yield name, function


def defaulted_parameters(namespace):
    """For each graded function of `namespace` that has parameters with defaults other than None,
    their names (at most 8, each one the protocol carries): read from its code and defaults alone."""
    found = {}
    for name, function in _plain_functions(namespace):
        code = function.__code__
        positional = code.co_varnames[:code.co_argcount]
        defaults = function.__defaults__
        # (a default of None, which the function then replaces, says nothing)
        names = [key for key, value in zip(positional[len(positional) - len(defaults):], defaults)
                 if value is not None] if type(defaults) is tuple and defaults else []
        kwonly = function.__kwdefaults__
        if type(kwonly) is dict:
            names += [key for key in code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
                      if kwonly.get(key, None) is not None]
        names = [key for key in names if protocol.is_name(key)][:8]
        if names:
            found[name] = names
    return found


_STORE_FAST = __import__("opcode").opmap["STORE_FAST"]


def unset_parameters(namespace):
    """For each graded function of `namespace`, its parameters whose default is None and that its
    own code assigns (`if temperature is None: temperature = ...`): what every call of the graders
    leaves unset, and the body then fills in. At most 8 names a function, read from its bytecode."""
    found = {}
    for name, function in _plain_functions(namespace):
        code = function.__code__
        stored = set(_op_args(code, (_STORE_FAST,)))
        positional = code.co_varnames[:code.co_argcount]
        defaults = function.__defaults__ if type(function.__defaults__) is tuple else ()
        first = len(positional) - len(defaults)
        names = [key for index, key in enumerate(positional)
                 if index >= first and defaults[index - first] is None and index in stored]
        kwonly = function.__kwdefaults__ if type(function.__kwdefaults__) is dict else {}
        names += [key for index, key in enumerate(code.co_varnames[code.co_argcount:
                                                                   code.co_argcount + code.co_kwonlyargcount],
                                                  start=code.co_argcount)
                  if key in kwonly and kwonly[key] is None and index in stored]
        names = [key for key in names if protocol.is_name(key)][:8]
        if names:
            found[name] = names
    return found


def chapter_needs(names) -> set:
    """`names` and every function of the chapter's they call, directly or not."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(CHAPTER_CALLS.get(name, ()))
    return found


def _cell_name(filename, number, notebook):
    """The file name a cell's code is compiled under: what its tracebacks show."""
    return "%s, cell %d" % (filename, number) if notebook else filename


def _precompiled(cells, filename, notebook, captured):
    """Each cell's code, compiled before any runs; None where compiling one raises or prints (a
    SyntaxWarning, say): that source is compiled anew, cell by cell as it runs, so its output and
    its errors come where and as they always do."""
    try:
        codes = []
        for index, cell in enumerate(cells):
            number, source = cell[:2] if type(cell) is tuple else (index + 1, cell)
            codes.append(compile(source, _cell_name(filename, number, notebook), "exec"))
    except BaseException:
        codes = None
    if captured.take():
        codes = None
    return codes


def _dumped(codes):
    """`codes` in marshal's format, for the worker to keep; empty when too large to keep."""
    import marshal

    try:
        data = marshal.dumps(codes)
    except BaseException:
        return b""
    return data if len(data) <= protocol.MAX_VALUE_BYTES else b""


def _codes(data, count):
    """The `count` cells' codes an earlier child compiled (`_precompiled`), or None."""
    import marshal

    try:
        codes = marshal.loads(data)
    except BaseException:
        return None
    if type(codes) is not list or len(codes) != count or any(type(code) is not _CODE for code in codes):
        return None
    return codes


_CODE = type(_cell_name.__code__)


def _child_main(job, source_in, calls_in, out, bell, ring_every, seal, arguments, builtins_at_start):
    """`builtins_at_start`: (builtins as they are once exit and quit are replaced, a live view of
    their dict's version tag or None), made once by the fork server: a copy made here would write
    to every builtin's page, each copied on write."""
    import builtins
    import marshal
    import resource

    limits, scratch, cpu_seconds = job["limits"], job["scratch"], job["cpu"]
    arguments.close()  # every hidden call's arguments: unmapped here, before any student code
    chunks = []
    while True:  # its own source, from the worker, on a pipe of its own
        chunk = os.read(source_in, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    data = b"".join(chunks)
    # ahead of it, on a run called again, the stand-ins it names (runner.chapter_functions)
    ahead = job.pop("chapter", 0)
    stand_ins, data = (data[:ahead], data[ahead:]) if type(ahead) is int and 0 < ahead <= len(data) else (b"", data)
    # and after it, where an earlier child of the same source compiled it (`Worker.codes`), what it compiled
    split = job.get("codes")
    job["cells"] = marshal.loads(data[:split] if type(split) is int and 0 < split < len(data) else data)
    compiled = _codes(data[split:], len(job["cells"])) if type(split) is int and 0 < split < len(data) else None
    del data, chunks
    _seal_descriptors({calls_in, out, bell} | ({seal.read_ruleset} if seal.read_ruleset is not None else set()))
    os.chdir(scratch)
    os.environ["HOME"] = os.environ["TMPDIR"] = scratch  # the rest was set once, by the fork server
    # No queued signal: the kernel counts them for the user, across classmates, and a child whose
    # own limit sat just above that count would see a classmate's pass it.
    for name, value in (("RLIMIT_AS", limits["memory"]), ("RLIMIT_CORE", 0), ("RLIMIT_FSIZE", FILE_SIZE),
                        ("RLIMIT_NOFILE", OPEN_FILES), ("RLIMIT_CPU", cpu_seconds), ("RLIMIT_SIGPENDING", 0)):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass
    seal.apply(scratch)

    captured = _CappedText(limits["output"])
    sys.stdout = sys.stderr = captured
    os._exit = sys.exit = builtins.exit = builtins.quit = _fake_exit

    # The child's own helpers, bound before the submission can touch builtins or modules.
    real_exit, pack, write_all = __import__("posix")._exit, protocol.pack, protocol.write_all
    replace = [name for name in job.get("replace") or () if name in CHAPTER_NAMES]
    # the stand-ins this job was sent (none but on a run called again), compiled before any student code
    chapter = compile(stand_ins.decode("utf-8", "replace"), "the chapter's head (§15.6)", "exec")
    del stand_ins
    run_code, numpy_module, absent = exec, sys.modules["numpy"], object()
    # Called again example by example: a batch call is made once for each example alone, and its
    # results returned together, for the grader to compare with what the batch call gave.
    per_example = protocol.PER_EXAMPLE in (job.get("replace") or ())
    result_frame, write, plain_text = protocol.result_frame, os.write, protocol.plain_text
    out_cap = protocol.MAX_TEXT  # what the grader accepts; the capture itself keeps fewer (`output`)
    saved_builtins, version = builtins_at_start
    unchanged = [version.value if version is not None else None]

    def restore_builtins():
        # Comparing the dicts holds each value and key for a moment, which writes to its count:
        # in a fresh fork, that copies the page of every builtin. Their version tag says as much
        # without reading them, where the interpreter keeps one.
        if version is not None and version.value == unchanged[0]:
            return
        current = builtins.__dict__
        if current != saved_builtins:
            current.clear()
            current.update(saved_builtins)
        if version is not None:
            unchanged[0] = version.value

    unrung = [0]  # bytes written since the worker was last told to read

    def ring():
        unrung[0] = 0
        try:
            write(bell, b"!")
        except OSError:  # full (it has rung) or closed
            pass

    def deliver(frame):
        if unrung[0] + len(frame) > ring_every:  # the pipe could fill: the worker reads as it comes
            ring()
        unrung[0] += len(frame)
        write_all(out, frame)

    def printed():
        try:
            return plain_text(captured.take(), out_cap)
        except BaseException:  # the capture object itself was tampered with
            return "(printed output that could not be read)"

    def send(obj, data=b""):
        obj["out"] = printed()
        deliver(pack(obj, data))

    filename = job["filename"]
    module = type(sys)("attention_head")
    module.__file__ = filename
    sys.modules["attention_head"] = module
    # A module runs as one piece; a notebook cell by cell, as Jupyter does: an error or an exit in
    # one cell ends that cell only, and the next cell still runs.
    notebook = filename.endswith(".ipynb")
    if compiled is None and job.get("send_code") and not notebook:
        # A module is compiled whole before any of it runs, as Python compiles a file (a notebook's
        # cells are compiled one at a time as they run: an earlier cell may turn a warning into an
        # error, or raise the recursion limit). Sent to the worker as this child's first frame, a
        # later child of the same source (a step called again, a fresh start after a call that did
        # not finish) loads it instead of compiling it again. Written before the submission's code
        # runs, it is the compiler's own output: nothing the submission does can come before it.
        # This child runs the code as loaded too: loading rebuilds a set's constant, whose order
        # may then differ from the compiled one's, and every child of a source must run alike.
        compiled = _precompiled(job["cells"], filename, notebook, captured)
        data = b"" if compiled is None else _dumped(compiled)
        deliver(pack({"ev": "code"}, data))
        compiled = _codes(data, len(job["cells"])) if data else None
    stopped = []  # the notebook's cells that stopped with an error, as Jupyter would show them
    held, bound = {}, {}  # a notebook's graded names: what each is bound to, and the cells that bound it anew
    try:
        for index, cell in enumerate(job["cells"]):
            # a notebook's cell comes with its number among all the notebook's cells, and a third
            # item where its body runs, as IPython runs a %%timeit cell's, binding into a namespace of its own
            apart = type(cell) is tuple and len(cell) == 3
            number, cell = cell[:2] if type(cell) is tuple else (index + 1, cell)
            code = None
            try:  # in a notebook, a cell that will not compile or run ends that cell only, as in Jupyter
                code = compiled[index] if compiled is not None else compile(cell, _cell_name(filename, number, notebook),
                                                                             "exec")
                if apart:
                    exec(code, module.__dict__, {})
                else:
                    exec(code, module.__dict__)
            except BaseException as exc:
                if not notebook:
                    raise
                if len(stopped) < protocol.MAX_STOPPED:
                    stopped.append(_raised(exc, filename))
                    if isinstance(exc, (ExitCalled, SystemExit)):  # as Jupyter would say, not as caught here
                        stopped[-1].update(type="SystemExit", message="the cell called exit()")
                    defines = _binds(code, cell)
                    if defines:  # what it would have defined, had it run to the end
                        stopped[-1]["defines"] = defines
            if notebook:
                _note_bindings(module.__dict__, number, held, bound, absent)
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
        try:  # a key of the module's own making may compare itself with the name in any way
            text = module.__dict__.get(name)
            answers[name] = type(text) is str and bool(text.strip())
        except BaseException:
            answers[name] = False
        restore_builtins()
    imported = {"ev": "imported", "ok": True, "answers": answers}
    if stopped:  # sent only when there are some: most submissions' frame stays as it was
        imported["stopped"] = stopped
    outside = {}
    if job.get("replace") is None:  # a first run's: the grader reads them of no run called again
        for key, read in (("outside", names_read_outside), ("defaults", defaulted_parameters),
                          ("unset", unset_parameters)):
            try:
                found = read(dict(module.__dict__))
            except BaseException:  # a value whose own code raises when looked at: nothing said of it
                found = {}
            restore_builtins()
            if found:
                imported[key] = found
        outside = imported.get("outside", {})
    # A name bound by two cells or more, of the graded functions and the values they read from outside.
    told = list(GRADED_FUNCTIONS) + sorted({name for names in outside.values() for name in names})
    rebound = {name: bound[name][-MOST_BINDINGS:] for name in told if len(bound.get(name, ())) > 1}
    if rebound:  # likewise: sent only when there are some
        imported["bound"] = dict(list(rebound.items())[:protocol.MOST_BOUND])
    send(imported)

    import numpy  # noqa: F401  (already loaded by the worker; the arguments are numpy arrays)

    # Called again with some earlier steps' functions replaced (see the module's docstring): the
    # names (`replace`) are bound to the chapter's computation, each call afresh, and bound back after it.
    def bind(names, own, saved):
        """Bind each of `names`, and every other name of the module bound to the same function (an
        alias kept at import), to a fresh copy of the chapter's; never the step's own function `own`."""
        fresh = {"np": numpy_module, "__builtins__": builtins}  # a copy of its own: nothing kept from a call before
        run_code(chapter, fresh)
        namespace = module.__dict__
        # A stand-in's globals are `fresh`: it keeps only the stand-ins and what they call, so that
        # the step called again never reaches the chapter's version of itself (`scale.__globals__`).
        # What they call and is not replaced is the student's own function, whose step passes: a
        # stand-in for `attention` runs the student's `scores`, whose batch bug it must not hide.
        replaced = {name for name in names if namespace.get(name, absent) is not own}
        needed = chapter_needs(replaced)
        for name in CHAPTER_NAMES:
            if name not in needed:
                fresh.pop(name, None)
            elif name not in replaced:
                mine = namespace.get(name, absent)
                if callable(mine) and mine is not own:
                    fresh[name] = mine
        for name in names:
            original = namespace.get(name, absent)
            if original is own:
                continue
            aliases = [name]
            if original is not absent:
                aliases += [other for other, value in list(namespace.items())
                            if value is original and type(other) is str and other != name]
            for alias in aliases:
                saved.append((alias, namespace.get(alias, absent)))
                namespace[alias] = fresh[name]

    def unbind(saved):
        namespace = module.__dict__
        while saved:
            name, old = saved.pop()
            if old is absent:
                namespace.pop(name, None)
            else:
                namespace[name] = old

    read_call, calls = protocol.read_call, protocol.Reader(calls_in, max_blob=protocol.MAX_JOB_BYTES)
    while True:  # the worker hands over a step's calls at a time, the next only once these have answered
        try:
            if not calls.buffered():  # every call handed over has answered: the worker reads them now
                ring()
            raw = calls.read_raw(None)
        except protocol.ProtocolError:
            real_exit(0)
        # Read-only arrays backed by immutable bytes: writing into one raises where it happens.
        step_index, call_index, name, args = read_call(raw)
        where = {"ev": "result", "step": step_index, "call": call_index}
        try:  # a module's own __getattr__ may raise
            function = getattr(module, name, None)
        except BaseException:
            function = None
        if function is None:
            send(dict(where, raised={"type": "MissingName", "message": name, "where": None}))
            continue
        if not callable(function):  # defined, then bound again to a value (a notebook's later cell, say)
            try:
                kind = protocol.plain_text(type(function).__name__, 60)
            except BaseException:
                kind = "value"
            send(dict(where, raised={"type": "TypeError", "where": None, "message": (
                "%s is no longer a function but a value of type %s: after its def, something assigned to the name "
                "(in a notebook, a later cell such as `%s = ...`)" % (name, kind, name))}))
            continue
        failure = value = None
        saved = []
        try:  # its time is kept by the worker, from outside
            if replace:  # never the step's own function
                bind([other for other in replace if other != name], function, saved)
            if per_example and args and type(args[0]) is numpy_module.ndarray and args[0].ndim == 3:
                if replace:
                    # with functions replaced too: the batch call, beside its examples alone (None where
                    # one of those raised: the batch call's own result stands all the same)
                    whole = function(*args)
                    try:
                        value = (whole, tuple(function(example, *args[1:]) for example in args[0]))
                    except Exception:
                        value = (whole, None)
                else:
                    value = tuple(function(example, *args[1:]) for example in args[0])
            else:
                value = function(*args)
        except BaseException as exc:
            failure = exc
        if saved:
            try:  # the student's own functions back in place, before anything else
                unbind(saved)
            except BaseException:
                real_exit(0)  # the worker reports the call as not finished: nothing is verified
        restore_builtins()
        if failure is not None:
            kind = ("exit" if isinstance(failure, (ExitCalled, SystemExit)) else
                    "memory" if isinstance(failure, MemoryError) else None)
            if kind:  # the step ends here; the worker starts a fresh child for the next one
                send({"ev": "fault", "step": step_index, "call": call_index, "kind": kind})
                real_exit(0)
            send(dict(where, raised=_raised(failure, filename)))
            continue
        text = printed()
        try:
            frame = result_frame(step_index, call_index, value, text)
        except BaseException:
            frame = pack(dict(where, value={"t": "bad", "type": "an object that could not be read"}, out=text))
        deliver(frame)


# ---------------------------------------------------------------- the worker ------------------


def _end(pid):
    """Kill a child and go on: once SIGKILL is sent it runs no more code, and its exit, which takes
    a few milliseconds of the kernel's time, finishes on its own (the fork server collects it)."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _how_it_ended(status):
    """('crashed', signal name) or ('exit', status) for a wait status."""
    import signal

    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "signal %d" % number
        return "crashed", name
    return "exit", "exit status %d" % os.WEXITSTATUS(status)


class ForkServer:
    """Forks the children, from a copy of the worker made before it read any submission.

    The worker reads every submission's source and every result, so a child forked from it could
    find a classmate's code or answers in memory it inherited. The fork server is forked once,
    right after numpy and the plan are loaded, and learns nothing afterwards but each child's file
    name, limits and scratch folder: the child reads its own source from a pipe of its own.
    """

    def __init__(self, seal, arguments, channels):
        """`channels`: the worker's descriptors to the grader, which the fork server closes."""
        import socket

        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            status = 70
            try:
                self.sock.close()
                for fd in channels:
                    os.close(fd)
                _serve_forks(theirs, seal, arguments)
                status = 0
            finally:
                os._exit(status)
        theirs.close()

    def spawn(self, meta):
        """A new child: its pid, and the worker's ends of its result, call, source and bell pipes."""
        import socket

        self.sock.send(json.dumps(meta).encode())
        data, fds, _, _ = socket.recv_fds(self.sock, 1024, 4)
        if not data or len(fds) != 4:
            raise SystemExit("the fork server failed")
        return (json.loads(data)["pid"], *fds)

    def ended(self, pid):
        """How a child that closed its end of the result pipe ended."""
        self.sock.send(json.dumps({"wait": pid}).encode())
        data = self.sock.recv(1024)
        if not data:
            raise SystemExit("the fork server failed")
        return tuple(json.loads(data))


def _serve_forks(sock, seal, arguments):
    import builtins
    import socket

    os.environ.clear()  # what every child's environment holds; each adds its own HOME and TMPDIR
    os.environ.update(PATH="/usr/bin:/bin", LANG="C.UTF-8")
    # What every child would make for itself, made once here: a child inherits it from its fork.
    builtins_at_start = (dict(builtins.__dict__, exit=_fake_exit, quit=_fake_exit),
                         _version_tag(builtins.__dict__))
    ended = {}  # pid -> wait status, for the children collected before the worker asked
    children = set()  # every child not collected yet: a zombie's pid is never reused meanwhile
    while True:
        data = sock.recv(1 << 16)
        if not data:  # the worker is gone (the grader ends it on a frame it refuses): so is its child
            for pid in children:
                _end(pid)
            return
        request = json.loads(data)
        while True:  # collect every child that has ended, without waiting for the others
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            ended[pid] = status
            children.discard(pid)
        if len(ended) > 256:
            ended.clear()
        if "wait" in request:
            status = ended.pop(request["wait"], None)
            if status is None:
                try:
                    status = os.waitpid(request["wait"], 0)[1]
                except ChildProcessError:
                    status = 0
            children.discard(request["wait"])
            sock.send(json.dumps(_how_it_ended(status)).encode())
            continue
        results_in, results_out = os.pipe()
        calls_in, calls_out = os.pipe()
        source_in, source_out = os.pipe()
        bell_in, bell_out = os.pipe()
        try:
            fcntl.fcntl(calls_out, F_SETPIPE_SZ, CALLS_PIPE)
        except OSError:
            pass
        try:
            held = fcntl.fcntl(results_out, F_SETPIPE_SZ, RESULTS_PIPE)
        except OSError:  # as it is: 64 KiB, or a page for a user holding too much pipe memory
            held = fcntl.fcntl(results_out, F_GETPIPE_SZ)
        os.set_blocking(bell_out, False)  # a bell already full has rung: ringing never waits
        pid = os.fork()
        if pid == 0:
            real_exit = os._exit  # the submission replaces os._exit: the child's last step must not be its
            try:
                sock.close()
                for fd in (results_in, calls_out, source_out, bell_in):
                    os.close(fd)
                _child_main(request, source_in, calls_in, results_out, bell_out, held // 2, seal, arguments,
                            builtins_at_start)
            finally:
                real_exit(70)
        children.add(pid)
        for fd in (results_out, calls_in, source_in, bell_out):
            os.close(fd)
        socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [results_in, calls_out, source_out, bell_in])
        for fd in (results_in, calls_out, source_out, bell_in):
            os.close(fd)


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
    if expected == "code":  # sent before any of the submission's code ran
        if event != "code":
            raise protocol.ProtocolError("something other than the compiled source")
        protocol.only(obj, "ev")
        return {"ev": "code"}, blob
    text = protocol.text(obj, "out", optional=True)
    if expected is None:
        if event != "imported" or type(obj.get("ok")) is not bool:
            raise protocol.ProtocolError("something other than the module's import result")
        protocol.only(obj, "ev", "ok", "error", "answers", "out", "stopped", "outside", "bound", "defaults", "unset")
        clean = {"ev": "imported", "ok": obj["ok"], "out": text or ""}
        if obj["ok"]:
            clean["answers"] = protocol.answers(obj.get("answers", {}))
            if "stopped" in obj:
                clean["stopped"] = protocol.stopped(obj["stopped"])
            if "outside" in obj:
                clean["outside"] = protocol.outside(obj["outside"])
            if "bound" in obj:
                clean["bound"] = protocol.bound(obj["bound"])
            for key in ("defaults", "unset"):
                if key in obj:
                    clean[key] = protocol.outside(obj[key])
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
    if event == "result":
        # Refused for its size, or else it is the next call's result but not in the form the
        # protocol writes it (which the worker takes by its first bytes: see Reader.take_results).
        _spend(used, len(blob))
        raise protocol.ProtocolError("a result not written as the protocol writes one")
    protocol.only(obj, "ev", "step", "call", "kind", "out")
    if obj.get("kind") not in ("exit", "memory"):
        raise protocol.ProtocolError("a fault of unknown kind")
    return {"ev": "fault", "step": step, "call": call, "kind": obj["kind"], "out": text or ""}, b""


def _spend(used, count):
    """Count `count` more bytes of array data against the submission's budget; a result that would
    go past it is refused, and its bytes are not counted (the grader counts the same way)."""
    if used[0] + count > protocol.MAX_JOB_BYTES:
        raise protocol.ProtocolError("more array data than a submission may return")
    used[0] += count


MOST_CODES = 8
MOST_CODE_BYTES = 8 << 20
"""What a worker keeps of its children's compiled sources, each with the source it is kept for: those
of the last few submissions it ran."""


class Worker:
    def __init__(self, config, out, seal, scratch_root, forks):
        self.config, self.out, self.seal, self.scratch_root, self.forks = config, out, seal, scratch_root, forks
        self.pending = bytearray()  # results not yet passed on to the grader
        self.checked = 0.0  # when the scratch folder's quota was last checked
        self.bell = None  # the worker's end of the running child's bell, until the child closes it
        self.ends = math.inf  # when the running job's time budget runs out (monotonic)
        self.first_import = None  # how long the job's first import took, in seconds
        self.codes = {}  # (file name, cells) -> what a child compiled of them (marshal), oldest first
        # where the worker's /tmp is its own (config "private_tmp"): that /tmp, and the last child run
        self.private_tmp = os.path.dirname(scratch_root) if config.get("private_tmp") else None
        self.left_by = None

    def emit(self, frame):
        self.pending += frame

    def flush_some(self):
        """Pass results on only in bulk (the grader judges a submission once all of it is in), and
        while a child works on a call, only as much as the grader's pipe takes at once: the grader
        may be judging an earlier submission, reading nothing, and waiting for it would run the
        call's clock (and the run's budget) on time the child never had. The rest waits for the
        next flush, up to PENDING_MOST: a submission whose own results outgrow that waits on its
        own clock (honest results are a few hundred kilobytes a run)."""
        if len(self.pending) > PENDING_BYTES:
            self._write(wait=len(self.pending) > PENDING_MOST)

    def flush(self):
        """Pass every result on, waiting for the grader to take them: between children."""
        if self.pending:
            self._write(wait=True)

    def _write(self, wait):
        view = memoryview(self.pending)
        written = 0
        try:
            if wait:
                protocol.write_all(self.out, view)
                written = len(view)
            else:
                os.set_blocking(self.out, False)
                try:
                    while written < len(view):
                        written += os.write(self.out, view[written:])
                except BlockingIOError:
                    pass
                finally:
                    os.set_blocking(self.out, True)
        finally:
            view.release()
            del self.pending[:written]

    def serve(self, job, stdin, cells_len):
        job["cells"] = protocol.read_exactly(stdin, cells_len)  # in marshal's format, passed on as it is
        self.run_job(job)

    def run_job(self, job):
        steps, tag, used = job["steps"], job["job"], [0]
        again = job.get("again")
        budget = job["limits"].get("budget")
        self.ends = time.monotonic() + (budget if type(budget) in (int, float) and budget > 0 else math.inf)
        self.first_import = None
        # What importing again may take uncharged, in all: one import's limit. Each call that hangs
        # starts a fresh child; were each of its imports free, a module whose import takes just
        # under its limit would buy that much again with every hanging call, minutes in all.
        self.credit_left = float(job["limits"]["import_timeout"])
        if again is None:
            start = 0
            while start is not None and start < len(steps):
                start = self.run_child(job, start, tag, used)
        else:  # each step asked for again alone, in a child of its own: nothing one keeps reaches another
            for index, names in again:
                # a step, or the steps its calls were parted into (runner.prepare)
                indexes = index if type(index) is list else [index]
                if not indexes or any(type(i) is not int or not 0 <= i < len(steps) for i in indexes) \
                        or type(names) is not list:
                    continue
                alone = dict(job, steps=[places if number in indexes else [] for number, places in enumerate(steps)],
                             replace=[name for name in names if type(name) is str])
                start = min(indexes)
                while start is not None and start <= max(indexes):
                    start = self.run_child(alone, start, tag, used)
        self.emit(protocol.pack({"ev": "done", "job": tag}))
        self.flush()

    def run_child(self, job, start, tag, used):
        """Run the plan from step `start` in a fresh sealed child; returns where to go on, or None.
        Once the job's time budget has run out, no child: each step from `start` that holds calls
        says its first call was not run (the rest of it is then skipped, as after a call that did
        not finish)."""
        if time.monotonic() >= self.ends:
            for step in range(start, len(job["steps"])):
                if job["steps"][step]:
                    self.emit(protocol.pack({"ev": "fault", "job": tag, "step": step, "call": 0, "kind": "budget",
                                             "detail": None, "out": ""}))
            self.flush()
            return None
        limits = job["limits"]
        calls = sum(len(step) for step in job["steps"][start:])
        if self.left_by is not None:
            # Everything the last child left in the private /tmp, swept once it has exited (killed, it
            # runs no more code, but a call it was in may still finish): by now it has, almost always
            self.forks.ended(self.left_by)
            self.left_by = None
            _sweep(self.private_tmp, self.scratch_root)
        scratch = _new_folder(self.scratch_root, "s")
        meta = {"limits": limits, "filename": job["filename"], "answers": job["answers"], "scratch": scratch,
                "replace": job.get("replace"),
                "cpu": int(limits["import_timeout"] + calls * limits["call_timeout"] + 5)}
        # the stand-ins the job names, as the grader sent them with it (the chapter's head is never
        # in the worker's view), passed on ahead of the source on the child's own pipe: never through
        # the fork server, whose memory every later child inherits
        sent = job.get("stand_ins") if type(job.get("stand_ins")) is dict else {}
        stand_ins = "".join(sent[name] for name in CHAPTER_NAMES
                            if name in (job.get("replace") or ()) and type(sent.get(name)) is str).encode()
        if stand_ins:
            meta["chapter"] = len(stand_ins)
        key = (job["filename"], job["cells"])
        codes = self.codes.pop(key, None)
        if codes is not None:  # compiled by an earlier child: sent after the source, kept the longest
            self.codes[key] = codes
            meta["codes"] = len(job["cells"])
        elif not job["filename"].endswith(".ipynb"):  # a module's (see _child_main)
            meta["send_code"] = True
        pid, read_end, calls_out, source_out, self.bell = self.forks.spawn(meta)
        try:
            for fd in (read_end, self.bell, calls_out):
                os.set_blocking(fd, False)
            try:
                protocol.write_all(source_out, stand_ins + job["cells"])
                if codes is not None:
                    protocol.write_all(source_out, codes)
            except OSError:
                pass  # the child is gone: its read end tells the rest
            os.close(source_out)
            return self.supervise(job, start, tag, used, pid, read_end, calls_out, scratch,
                                  key if meta.get("send_code") else None)
        finally:
            os.close(read_end)
            if self.bell is not None:
                os.close(self.bell)
                self.bell = None
            try:
                os.close(calls_out)
            except OSError:
                pass
            remove_tree(scratch)
            if os.path.lexists(scratch):  # what is left, the child may still be writing: once it is gone
                self.forks.ended(pid)
                remove_tree(scratch)
            if self.private_tmp:
                self.left_by = pid  # what it left elsewhere in the private /tmp: swept before the next child

    def wait_watching(self, reader, deadline, scratch):
        """Wait until the child's next frame is whole in `reader`'s buffer; meanwhile, every
        DISK_POLL seconds, its scratch folder must stay within its quota.

        The worker reads the child's results when the child rings its bell (once every call it
        holds has answered, or before its result pipe could fill), while a frame is half read, and
        at the latest every DISK_POLL seconds: not woken at every result, it costs the child less.
        A frame counts as arriving when it is read, so a child that never rings only makes its
        own results later.
        """
        while True:
            # Every frame already written is taken first: a quota found outgrown belongs to the
            # call still running, not to one whose result waits unread.
            if reader.ready():
                return
            now = time.monotonic()
            if now - self.checked > DISK_POLL:
                self.checked = now
                # where the worker's /tmp is its own, all of it: a child that Landlock does not
                # confine may write anywhere there
                if _over_quota(self.private_tmp or scratch):
                    raise OverQuota("it wrote more than %d MiB or %d files, or made a folder that cannot be counted"
                                    % (SCRATCH_BYTES >> 20, SCRATCH_ENTRIES))
            if now >= deadline:
                raise protocol.TimedOut("no whole frame before the deadline")
            watched = reader.fd if self.bell is None or reader.buffer else self.bell
            if select.select([watched], [], [], min(deadline - now, DISK_POLL))[0] and watched == self.bell:
                try:
                    rung = os.read(watched, 1 << 12)
                except BlockingIOError:
                    continue
                if not rung:  # closed: from now on the results themselves wake the worker
                    os.close(watched)
                    self.bell = None

    @staticmethod
    def hand_over(calls_out, places, arguments, deadline):
        """Write as many of a step's remaining calls to the child's pipe as fit in it whole (at
        least one), so this never waits on the child; returns how many were written.

        The pipe is non-blocking, and an honest child has read every call it answered: one that
        answered calls it never read (forged results) finds the pipe still full, and is ended.
        The room is the pipe's own: CALLS_PIPE where the kernel grants it, less for a user who
        already holds too much pipe memory (the kernel then gives a page or two). A single call
        larger than that room goes in as the child reads it, until `deadline` (monotonic)."""
        room = fcntl.fcntl(calls_out, F_GETPIPE_SZ)
        count = 1
        while count < len(places) and places[count][0] + places[count][1] - places[0][0] <= room \
                and places[count][0] == places[count - 1][0] + places[count - 1][1]:  # one piece of the plan
            count += 1
        start, end = places[0][0], places[count - 1][0] + places[count - 1][1]
        view = memoryview(arguments)[start:end]
        try:
            if len(view) <= room:
                protocol.write_all(calls_out, view)
            else:
                while view:
                    try:
                        view = view[os.write(calls_out, view):]
                    except BlockingIOError:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or not select.select([], [calls_out], [], remaining)[1]:
                            raise protocol.TimedOut("it did not read the call handed to it")
        except BlockingIOError:
            raise protocol.ProtocolError("it answered calls it never read")
        except OSError:
            pass  # the child is gone: its read end tells the rest
        return count

    def keep_code(self, key, codes):
        """Keep what a child compiled from the source `key` (file name, cells), for the next child of it."""
        self.codes[key] = codes
        held = sum(len(cells) + len(kept) for (_, cells), kept in self.codes.items())
        while self.codes and (len(self.codes) > MOST_CODES or held > MOST_CODE_BYTES):  # the oldest first
            oldest = next(iter(self.codes))
            held -= len(oldest[1]) + len(self.codes.pop(oldest))

    def supervise(self, job, start, tag, used, pid, read_end, calls_out, scratch, code_for=None):
        """`code_for`: the source (`Worker.codes`' key) whose compiled code the child sends first."""
        limits, steps, arguments, public = job["limits"], job["steps"], job["arguments"], job.get("public", 0)
        reader = protocol.Reader(read_end)
        expected = "code" if code_for is not None else None  # None: the import result; then (step, call); then "end"
        # Importing again in a fresh process (after a call that did not finish) is not charged to the
        # budget, up to what the first import took and a second more, and up to one import's limit
        # over the whole run (`credit_left`): a notebook's slow cell, run again after a hanging call
        # or two, must not cost its correct steps their turn. What the budget bounds is the time of
        # the calls themselves, finished or not.
        began = time.monotonic()
        credit = 0.0 if self.first_import is None else min(self.first_import + 1.0, limits["import_timeout"],
                                                          self.credit_left)
        deadline = min(began + limits["import_timeout"], self.ends + credit)
        sent = None  # when the expected call's time began: its hand-over, or the last result
        handed = None  # (step, last call) of the calls the child holds
        while True:
            try:
                self.wait_watching(reader, deadline, scratch)
                now = time.monotonic()
                if sent is not None and now - sent > limits["call_timeout"] + TOLERANCE:
                    raise protocol.TimedOut("the call ran past its limit")
                taken = None
                if type(expected) is tuple:
                    # The expected call's result, by its first bytes, and the results after it of
                    # the calls the child holds: passed on without reading further. The grader
                    # reads each whole, and refuses it if any later field says otherwise
                    # (protocol.Reader.parse), as it refuses a value it cannot check.
                    last = (expected[1] if handed is None or handed[0] < expected[0] else
                            handed[1] if handed[0] == expected[0] else len(steps[expected[0]]) - 1)
                    taken = reader.take_results(*expected, last, protocol.MAX_JOB_BYTES - used[0])
                if taken is not None:
                    raw, count, blobs = taken
                    used[0] += blobs
                    clean, expected = {"ev": "result"}, (expected[0], expected[1] + count - 1)
                else:
                    raw = reader.pull()
                    clean, blob = _check_child_frame(*protocol.Reader.parse(raw), expected, used)
            except protocol.ProtocolError as exc:
                return self.stop_child(exc, pid, expected, tag, start)
            event = clean["ev"]
            if event == "code":  # the worker's own: kept, never passed on
                if blob:
                    self.keep_code(code_for, blob)
                expected = None
                continue
            if event == "result":  # passed on as they came
                self.emit(raw)
            else:
                clean["job"] = tag
                self.emit(protocol.pack(clean, blob))
            if event == "fault":
                _end(pid)
                self.flush()
                return clean["step"] + 1
            if event == "imported":
                took = time.monotonic() - began
                if self.first_import is None:
                    self.first_import = took
                else:
                    self.ends += min(took, credit)
                    self.credit_left -= min(took, credit)
                if not clean["ok"]:
                    _end(pid)
                    self.flush()
                    return None
            expected = _next_call(steps, (start, -1) if event == "imported" else expected)
            if expected is None:  # every call answered: the child has nothing more to do
                _end(pid)
                self.flush()
                return None
            if handed is None or expected > handed:
                # the child holds no more calls: hand over the rest of the plan, as far as the
                # public calls go while any is left (none of them sees a hidden input)
                end = public if expected[0] < public else len(steps)
                held = [(expected[0], call) for call in range(expected[1], len(steps[expected[0]]))]
                held += [(step, call) for step in range(expected[0] + 1, end) for call in range(len(steps[step]))]
                try:
                    count = self.hand_over(calls_out, [steps[step][call] for step, call in held], arguments,
                                           time.monotonic() + limits["call_timeout"] + TOLERANCE)
                except protocol.ProtocolError as exc:
                    return self.stop_child(exc, pid, expected, tag)
                handed = held[count - 1]
            sent = time.monotonic()
            deadline = min(sent + limits["call_timeout"] + TOLERANCE, self.ends)
            self.flush_some()  # while the child works on the call

    def stop_child(self, exc, pid, expected, tag, start=None):
        """End a child that broke the protocol or a bound, report why for the call it was on, and
        return where a fresh child goes on (None: nowhere). A child whose import the time budget cut
        short goes on where it began (`start`): run_child then says of each step left that the budget
        ran out."""
        # Killed first: a child that closed its end may yet live on (past its time), and
        # is never waited for. One that was exiting keeps the status it had: a process's
        # pipes close only after its exit status is set.
        _end(pid)
        # a child that closed its end has exited: how it did is the diagnosis
        kind, detail = (self.forks.ended(pid) if isinstance(exc, protocol.Closed) else
                        ("budget", None) if isinstance(exc, protocol.TimedOut) and time.monotonic() >= self.ends else
                        ("timeout", None) if isinstance(exc, protocol.TimedOut) else
                        ("disk", protocol.reason(exc)) if isinstance(exc, OverQuota) else
                        ("protocol", protocol.reason(exc)))
        position = expected if isinstance(expected, tuple) else (None, None)
        if expected == "end":
            self.flush()
            return None
        if kind == "budget" and position[0] is None and start is not None:
            return start
        self.emit(protocol.pack({"ev": "fault", "job": tag, "step": position[0], "call": position[1],
                                 "kind": kind, "detail": detail, "out": ""}))
        self.flush()
        return None if position[0] is None else position[0] + 1


class OverQuota(protocol.ProtocolError):
    """The child's scratch folder outgrew its quota."""


def _over_quota(scratch):
    """Does the scratch folder hold more than its quota, or a folder the worker cannot count in?
    Stops counting at the first excess.

    The child owns its folders and may take their permissions away: what a folder it left -wx (not
    listable) or r-- (not searchable) holds would go uncounted, so such a folder is an excess too.
    """
    size, entries, folders = 0, 0, [scratch]
    while folders:
        try:
            with os.scandir(folders.pop()) as found:
                for entry in found:
                    entries += 1
                    if entries > SCRATCH_ENTRIES:
                        return True
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed since it was listed
                        continue
                    size += info.st_blocks * 512
                    if size > SCRATCH_BYTES:
                        return True
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
        except (FileNotFoundError, NotADirectoryError):  # removed or replaced since it was listed
            pass
        except OSError:
            return True
    return False


def _sweep(top, keep):
    """Remove everything in `top` but the folder `keep`, and everything in `keep` (made again, empty,
    if it is no longer a folder): what a child left outside its own folder, where nothing but this
    confines it (the worker's private /tmp, on a kernel without Landlock)."""
    for folder, mode in ((top, 0o1777), (keep, 0o700)):  # as the worker made them, whatever a child did
        try:
            if stat.S_ISDIR(os.lstat(folder).st_mode) and stat.S_IMODE(os.lstat(folder).st_mode) != mode:
                os.chmod(folder, mode)
        except OSError:
            pass
    try:
        if os.path.lexists(keep) and (os.path.islink(keep) or not os.path.isdir(keep)):
            os.unlink(keep)
        if not os.path.lexists(keep):
            os.mkdir(keep, 0o700)
    except OSError:
        pass
    for folder, spare in ((top, keep), (keep, None)):
        try:
            with os.scandir(folder) as entries:
                found = [(entry.path, entry.is_dir(follow_symlinks=False)) for entry in entries if entry.path != spare]
        except OSError:
            continue
        for path, folder_too in found:
            if folder_too:
                remove_tree(path)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def remove_tree(path):
    """Remove the folder `path` and all it holds, following no link, as deep as it goes: a child may
    nest folders thousands deep, past any recursion limit and any path's length, so this walks with
    one open folder at a time and names relative to it. A folder the child made unreadable or
    unwritable is given back its permissions first (its remover is its owner, or root). Best
    effort: what cannot be removed is left, and the walk still ends."""
    opening = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        here = os.open(path, opening)
    except PermissionError:  # the folder itself made unreadable (`mkdir(path, 0)`): its permissions back
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return
            os.chmod(path, 0o700)
            here = os.open(path, opening)
        except OSError:
            return
    except OSError:
        return
    entered = []  # the names of the folders between `path` and `here`
    above = []  # the (device, inode) of each folder entered from, to check the way back up by
    stuck = [set()]  # per level: the folders there that could not be entered or removed
    try:
        while True:
            inner = None
            try:
                with os.scandir(here) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name not in stuck[-1]:
                                inner = entry.name
                                break
                        else:
                            try:
                                os.unlink(entry.name, dir_fd=here)
                            except OSError:
                                pass
            except OSError:
                pass
            if inner is not None:
                try:
                    below = _enter(inner, here, opening)
                except OSError:
                    stuck[-1].add(inner)
                    continue
                info = os.fstat(here)
                above.append((info.st_dev, info.st_ino))
                os.close(here)
                here = below
                entered.append(inner)
                stuck.append(set())
                continue
            if not entered:
                break
            parent = os.open("..", opening, dir_fd=here)
            info = os.fstat(parent)
            os.close(here)
            here = parent
            if (info.st_dev, info.st_ino) != above.pop():  # moved meanwhile: go no further than here
                break
            stuck.pop()
            name = entered.pop()
            try:
                os.rmdir(name, dir_fd=here)
            except OSError:
                stuck[-1].add(name)
    except OSError:
        pass
    finally:
        os.close(here)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _enter(name, folder, opening):
    """Open the folder `name` in `folder` (never through a link), first giving it back the
    permissions a child may have taken away: through a handle on the folder itself, not through
    its name, which a child still finishing a call could meanwhile make a link elsewhere."""
    try:
        below = os.open(name, opening, dir_fd=folder)
    except PermissionError:  # not readable: a handle on the folder, and its permissions through that
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        try:
            os.chmod("/proc/self/fd/%d" % handle, 0o700)
            below = os.open(".", opening, dir_fd=handle)
        finally:
            os.close(handle)
    try:
        os.fchmod(below, 0o700)  # writable and searchable, so what it holds can be removed
    except OSError:
        pass
    return below


def _load_numpy(folder):
    """Import numpy from its own folder only: nothing else beside it becomes importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("numpy", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["numpy"] = module
    spec.loader.exec_module(module)
    # numpy.linalg and numpy.fft cost forked children nothing. numpy.random is left for the rare
    # submission that uses it to load: it brings threading, whose clean-up after every fork, with
    # the pages it touches, would cost every child half a millisecond.
    import numpy.fft, numpy.linalg  # noqa: E401,F401
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
    # No path needs resolving: a rule is made on what a path names, through any symbolic link.
    return sorted(set(paths)), sorted({stdlib, platstdlib})


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
    scratch = _new_folder(scratch_root, "probe")
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


def _new_folder(parent, prefix):
    """A new, empty folder of this process's own (0700) in `parent`, as tempfile.mkdtemp makes
    one: that module would bring shutil, random and their libraries into every child's memory."""
    while True:
        path = os.path.join(parent, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _scratch_root():
    for parent in (os.environ.get("TMPDIR"), "/tmp", "/var/tmp", os.getcwd()):
        if parent and os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
            return _new_folder(parent, "qkv-scratch-%d-" % os.getpid())  # its pid: whose it is
    raise SystemExit("no writable folder for the submissions' scratch folders")


def main():
    import resource  # noqa: F401  (loaded here once: every child sets its limits with it)
    import signal

    config = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader ends workers itself
    numpy = _load_numpy(config["numpy"])
    readable, listable = _readable(config["numpy"])
    user = _drop_privileges(config, [os.__file__, os.path.join(config["numpy"], "__init__.py")])
    try:  # nothing of the same user may trace the worker or read its memory
        _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        pass
    scratch_root = _scratch_root()
    seal = Seal(config)
    seal.prepare(readable + [scratch_root], listable)
    sealed = _probe_seal(seal, scratch_root) if seal.level == "full" else True

    stdin, stdout = config["channel"]
    for fd in (stdin, stdout):
        os.set_inheritable(fd, False)
    protocol.write_all(stdout, protocol.pack({
        "ev": "ready", "numpy": numpy.__version__, "landlock": seal.landlock, "seccomp": seal.seccomp is not None,
        "sealed": sealed, "user": user, "scratch": scratch_root, "problem": seal.error}))
    worker = None
    try:
        while True:
            try:
                head, blob_len = protocol.read_head(stdin)
            except protocol.Closed:
                return
            if "steps" in head:  # once: the plan is the same for every submission this worker grades
                if worker is not None:
                    raise SystemExit("a worker grades one plan")
                steps, arguments = head["steps"], _read_mapped(stdin, blob_len)
                public = head.get("public", 0)
                gc.collect()
                gc.freeze()  # forked children then never touch (and so never copy) the worker's own objects
                worker = Worker(config, stdout, seal, scratch_root, ForkServer(seal, arguments, (stdin, stdout)))
                continue
            head["steps"], head["arguments"], head["public"] = steps, arguments, public
            worker.serve(head, stdin, blob_len)
    finally:
        remove_tree(scratch_root)


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
