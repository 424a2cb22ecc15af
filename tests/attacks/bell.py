# The bell a child rings when its worker should read its results, found as the write-only pipe that
# is not the result pipe (the fork server makes that one larger), then filled at import and at every
# call ("bell_flood"), or closed at import ("bell_closed"). The base is the correct solution: the
# worker must still read every result in time, and hang on nothing.
import fcntl as _fcntl
import stat as _stat


def _bell():
    pipes = []
    for fd in range(3, 256):
        try:
            if _stat.S_ISFIFO(_os.fstat(fd).st_mode) and _fcntl.fcntl(fd, _fcntl.F_GETFL) & 3 == _os.O_WRONLY:
                pipes.append((_fcntl.fcntl(fd, 1032), fd))  # F_GETPIPE_SZ
        except OSError:
            pass
    pipes.sort()
    return pipes[0][1] if len(pipes) == 2 and pipes[0][0] < pipes[1][0] else None


_BELL = _bell()


def _flood():
    if _BELL is None:
        return
    _os.set_blocking(_BELL, False)
    try:
        while True:
            _os.write(_BELL, b"!" * 4096)
    except OSError:
        pass


if _BELL is None:
    _hole("found no bell to attack (the test needs updating)")
elif _RT["attack"] == "bell_closed":
    _os.close(_BELL)
else:
    _flood()
    _honest_softmax_rows, _honest_mix = softmax_rows, mix

    def softmax_rows(s):
        _flood()
        return _honest_softmax_rows(s)

    def mix(a, v):
        _flood()
        return _honest_mix(a, v)
