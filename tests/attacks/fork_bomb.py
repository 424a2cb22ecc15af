# A bounded fork bomb: up to 150 processes that each sleep 20 seconds, holding every descriptor
# they inherited. The bound keeps a shared machine usable even when the sandbox does not hold.
import time as _time

_started = 0
for _ in range(150):
    try:
        _pid = _os.fork()
    except OSError:
        break
    if _pid == 0:
        _time.sleep(20)
        _finish()
    _started += 1
if _started:
    _hole("started %d processes" % _started)
