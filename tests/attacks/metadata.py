# Change what Landlock does not govern: the mode, owner, times and extended attributes of files and
# folders outside the scratch folder (the instructor's home and secret, a classmate's submission,
# the run's folders), a readable library file's attribute flags (chattr), and, by truncating by
# path, its contents; and watch the class folder with inotify, which would name every classmate's
# file as the grader reads it. The base is the stub. A call that succeeds is a hole, whatever it
# changed: a sandboxed path that merely looks like the instructor's would still be a refusal missed.
def _metadata():
    import ctypes

    targets = [_RT["home"]] + list(_RT["secret_paths"]) + list(_RT["shared_dirs"])
    for path in targets:
        for what, call in (("chmod", lambda: _os.chmod(path, 0o777)),
                           ("chown", lambda: _os.chown(path, -1, -1)),
                           ("utime", lambda: _os.utime(path, (0, 0))),
                           ("setxattr", lambda: _os.setxattr(path, "user.qkvrt", b"planted")),
                           ("removexattr", lambda: _os.removexattr(path, "user.qkvrt")),
                           ("truncate", lambda: _os.truncate(path, 0) if _os.path.isfile(path) else None)):
            try:
                call()
            except (OSError, AttributeError):
                continue
            if what != "truncate" or _os.path.isfile(path):
                _hole("%s on %s succeeded" % (what, path))
    libc = ctypes.CDLL(None, use_errno=True)
    watcher = libc.inotify_init1(0)
    if watcher >= 0:
        for path in _RT["shared_dirs"]:
            if libc.inotify_add_watch(watcher, path.encode(), 0xFFF) >= 0:
                _hole("an inotify watch on %s" % path)
    import fcntl
    import numpy

    # file_getattr/file_setattr (Linux 6.17): the same attribute flags, without an ioctl
    attributes = ctypes.create_string_buffer(24)
    path = numpy.__file__.encode()
    if libc.syscall(468, -100, path, attributes, 24, 0) == 0 and libc.syscall(469, -100, path, attributes, 24, 0) == 0:
        _hole("set the attribute flags of %s with file_setattr" % numpy.__file__)
    try:
        with open(numpy.__file__, "rb") as handle:
            flags = bytearray(8)
            fcntl.ioctl(handle.fileno(), 0x80086601, flags)  # FS_IOC_GETFLAGS
            fcntl.ioctl(handle.fileno(), 0x40086602, flags)  # FS_IOC_SETFLAGS, to the same flags
            _hole("set the attribute flags of %s" % numpy.__file__)
    except OSError:
        pass


_metadata()
