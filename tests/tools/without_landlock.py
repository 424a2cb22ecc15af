"""Run a command as on a kernel without Landlock: a seccomp filter answers ENOSYS to
landlock_create_ruleset, landlock_add_rule and landlock_restrict_self (444-446 on x86_64 and
aarch64), as a kernel built without it, or with it left out of the lsm= boot list, does. The filter
is inherited by everything the command starts; the grader's own Landlock probe then finds none.

    python tests/tools/without_landlock.py COMMAND [ARGS...]
"""
import ctypes
import os
import struct
import sys

LOAD, JUMP_EQUAL, RETURN = 0x20, 0x15, 0x06
ALLOW, NO_SUCH_CALL = 0x7FFF0000, 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
PROGRAM = [(LOAD, 0, 0, 0)]  # the system call's number
for number in (444, 445, 446):
    PROGRAM += [(JUMP_EQUAL, 0, 1, number), (RETURN, 0, 0, NO_SUCH_CALL)]
PROGRAM.append((RETURN, 0, 0, ALLOW))


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in PROGRAM))
    program = _Filter(len(PROGRAM), ctypes.cast(code, ctypes.c_void_p))
    if os.geteuid() != 0 and libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, needed without root
        raise SystemExit("prctl(PR_SET_NO_NEW_PRIVS) failed: errno %d" % ctypes.get_errno())
    if libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise SystemExit("prctl(PR_SET_SECCOMP) failed: errno %d" % ctypes.get_errno())
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
