# Read the grader's /proc: every visible process's environ, cmdline and maps, and its memory where
# maps and mem can be opened, looking for the secret the test planted in the grader's environment
# (a stand-in for the hidden expected values it holds). Whatever is found is printed. Stub base.
import re as _re

_SECRET = _re.compile(rb"QKVRT_GRADER_SECRET=([0-9a-f]{32})")


def _read_proc():
    me = _os.getpid()
    found, budget = set(), 64 * 1024 * 1024
    print("note: /proc shows %d processes" % len(_pids()))
    for pid in _pids():
        if pid == me:
            continue
        for name in ("environ", "cmdline"):
            try:
                with open("/proc/%d/%s" % (pid, name), "rb") as handle:
                    data = handle.read()
            except Exception:
                continue
            if name == "environ" and data:
                _hole("read /proc/%d/environ (%s)" % (pid, _cmdline(pid)[:50]))
            found.update(_SECRET.findall(data))
        try:
            with open("/proc/%d/maps" % pid) as handle:
                regions = handle.read().splitlines()
            mem = open("/proc/%d/mem" % pid, "rb", buffering=0)
        except Exception:
            continue
        taken = 0
        with mem:
            for region in regions:
                fields = region.split()
                if len(fields) < 2 or not fields[1].startswith("r") or budget <= 0:
                    continue
                start, end = (int(part, 16) for part in fields[0].split("-"))
                size = min(end - start, budget, 16 * 1024 * 1024)
                try:
                    mem.seek(start)
                    data = mem.read(size)
                except Exception:
                    continue
                taken += len(data or b"")
                budget -= len(data or b"")
                found.update(_SECRET.findall(data or b""))
        if taken:
            _hole("read %d bytes of /proc/%d/mem (%s)" % (taken, pid, _cmdline(pid)[:40]))
    secret = _os.environ.get("QKVRT_GRADER_SECRET")
    if secret:
        found.add(secret.encode())
        _hole("the grader's environment reached the submission")
    for item in sorted(found):
        print("found grader secret %s" % item.decode())


_read_proc()
