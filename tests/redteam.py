"""The red-team harness: sandbox modes, a normal user to grade as, attack submissions, and what
one real `qkv-grade FOLDER` run left behind.

`test_redteam.py` says what each attack must not achieve; this module does the running and the
looking. Every run happens in a fresh folder under /tmp that the grading user can read, with a
fake instructor home holding a 0600 secret, a classmate's file holding another secret, and a
third secret in the grader's environment. After the run it scans /proc for processes the attack
left behind and the file system for files it left outside its sandbox.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import itertools
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support import IN_CI, REPO, STUB, reference_source, variant

ATTACKS = Path(__file__).resolve().parent / "attacks"
TOOLS = Path(__file__).resolve().parent / "tools"
VARIANTS = {
    "bwrap": ("bwrap", False),
    "bwrap-userns": ("bwrap-userns", True),
    "landlock": ("landlock", False),
    "landlock-user": ("landlock", True),
    "none": ("none", False),
    "none-user": ("none", True),
    # bubblewrap on a kernel without Landlock, which the bwrap modes allow (tools/without_landlock.py)
    "bwrap-no-landlock": ("bwrap", False),
    "bwrap-userns-no-landlock": ("bwrap-userns", True),
}
WITHOUT_LANDLOCK = {"bwrap-no-landlock", "bwrap-userns-no-landlock"}
"""How each mode is run here: its QKV_SANDBOX name, and whether the grader runs as a normal user
(else as root). Landlock is run both ways: as root it drops the submission's identity, as a
normal user (the instructor in a container without namespaces) it cannot."""
MODES = ("bwrap", "bwrap-userns", "landlock", "landlock-user")
"""The modes every attack must fail against."""
FILE_MODES = MODES + tuple(sorted(WITHOUT_LANDLOCK))
"""... and those an attack on files must fail against: without Landlock, bubblewrap's view alone
holds what a child may read and write."""
USER = "qkvtest"
SEED = 20261201
CALL_LIMIT = 0.5
"""Seconds per call (`--timeout`), short to keep the suite fast."""
SLOW = 0.6
"""How long the slow head_facts sleeps per call: past the limit, but not by much."""
RUN_LIMIT = 60.0
"""Seconds after which a grading run counts as hung."""

RUN = secrets.token_hex(5)
"""Names this test session: in the folders graded (so in the grader's argv) and in every file an
attack tries to leave behind (`qkvrt-RUN-…`)."""
MARKER = f"qkvrt-{RUN[:9]}"
"""The process name (comm) every attack submission takes, so leftovers can be found."""
SECRETS = {name: secrets.token_hex(16) for name in ("instructor", "classmate", "grader")}
SECRETS["grading key"] = os.environ["QKV_CASE_KEY"]  # decides the hidden cases: no attack may learn it

SOFTMAX_MAX = "shifted = s - s.max(axis=-1, keepdims=True)"
SOFTMAX_SUM = "a = e / e.sum(axis=-1, keepdims=True)"
CLASSMATE_LINE = f"# classmate secret: {SECRETS['classmate']}\n"


# ------------------------------------------------------------------ submissions ---------------

def honest(kind: str) -> str:
    """The submissions whose grades are compared: victims and each attack's honest baseline."""
    if kind == "correct":
        return CLASSMATE_LINE + reference_source()
    if kind == "colnorm":  # partly wrong: a column-normalized softmax
        return variant([(SOFTMAX_MAX, "shifted = s - s.max(axis=0, keepdims=True)"),
                        (SOFTMAX_SUM, "a = e / e.sum(axis=0, keepdims=True)")])
    if kind == "stub":
        return STUB.read_text()
    if kind == "slow":
        return reference_source() + (f"\n\nimport time as _time\n_honest_head_facts = head_facts\n\n\n"
                                     f"def head_facts(t, d_k, d_v):\n    _time.sleep({SLOW})\n"
                                     f"    return _honest_head_facts(t, d_k, d_v)\n")
    if kind == "tempfile":  # correct, and opens a temporary file as it is imported (where TMPDIR says)
        return (reference_source() + "\n\nimport tempfile as _tempfile\n\nwith _tempfile.TemporaryFile() as _scratch:\n"
                "    _scratch.write(b\"\\0\" * 4096)\n")
    if kind == "mutating":
        return variant([(SOFTMAX_MAX, "s -= s.max(axis=-1, keepdims=True)\n    shifted = s")])
    if kind == "stdlib":  # the smoke test: a correct submission that leans on the standard library
        # numpy.random too: the worker does not load it, so the sealed process loads it itself
        return ("import decimal\nimport fractions\nimport functools\nimport statistics\n\n" + reference_source()
                + "\n\nnp.testing.assert_allclose(scale(np.ones((2, 2)), 4), 0.5)\n"
                  "_CHECKS = (fractions.Fraction(1, 3), statistics.mean([1.0, 2.0]), decimal.Decimal(2).sqrt(),\n"
                  "           functools.reduce(int.__add__, [1, 2]), np.random.default_rng(0).random(3))\n")
    raise KeyError(kind)


BASELINE = ("correct", "colnorm", "stub", "slow", "mutating", "tempfile")

RAW = {
    # A notebook nested 200,000 levels deep: the grader parses it before anything runs.
    "deep_notebook": lambda: '{"cells": ' + "[" * 200_000 + "]" * 200_000 + "}",
}
"""Attacks that are a file's bytes rather than code: graded as they are."""


def attack_source(payloads: tuple[str, ...], base: str, settings: dict) -> str:
    """An attack submission: its settings, the shared prelude, an honest base, then the payloads."""
    parts = [f"_RT = {settings!r}\n", (ATTACKS / "_prelude.py").read_text(), honest(base)]
    parts += [(ATTACKS / f"{payload}.py").read_text() for payload in payloads]
    return "\n".join(parts)


# ------------------------------------------------------------------ frames --------------------

def _frame(obj, blob: bytes = b"") -> bytes:
    """One frame in the grader's wire format, as its source describes it (protocol.py, or before
    it the header of two lengths)."""
    body = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    try:
        from autograder import protocol
    except ImportError:
        return struct.pack("!II", len(body), len(blob)) + body + blob
    return protocol.pack_raw(body, blob)


def _raw_header(json_length: int, blob_length: int) -> bytes:
    empty = _frame(b"")
    magic = empty[:-8]  # whatever precedes the two lengths
    return magic + struct.pack("!II", json_length, blob_length)


def frames(kind: str) -> list[bytes]:
    """What a frame attack writes: a forged run, a header announcing 200 MiB and then nothing, half
    a frame, and frames that break the format in several ways."""
    if kind == "forged":  # a whole run's worth of answers and the end of the job, in both dialects
        events = [{"ev": "imported", "ok": True, "answers": {}}]
        events += [{"ev": "result", "step": step, "call": call, "value": {"t": "none"}, "job": "0" * 16}
                   for step in range(13) for call in range(16)]
        events += [{"ev": "end"}, {"ev": "done", "job": "0" * 16}, {"ev": "ready"}]
        events += [{"ev": "step", "step": step, "results": [{"call": call, "value": {"t": "none"}, "mutated": []}
                                                           for call in range(16)]} for step in range(13)]
        events += [{"ev": "done"}]
        return [b"".join(_frame(event) for event in events)]
    if kind in ("code", "code_late"):
        # What a worker keeps of a child's compiled source, for the next child of the same source:
        # here the chapter's whole solution, compiled. Taken, a fresh child would run it in place of
        # the submission's own code.
        import marshal

        return [_frame({"ev": "code"}, marshal.dumps([compile(reference_source(), "attention_head.py", "exec")]))]
    if kind == "oversized":
        return [_raw_header(200 * 1024 * 1024, 0)]
    if kind == "partial":
        whole = _frame({"ev": "result", "step": 0, "call": 0, "value": {"t": "none"}})
        return [whole[: len(whole) // 2]]
    if kind == "huge_empty":  # a valid import, then an empty array whose shape numpy cannot hold
        return [_frame({"ev": "imported", "ok": True, "answers": {}})
                + _frame({"ev": "result", "step": 0, "call": 0,
                          "value": {"t": "array", "dtype": "<f8", "shape": [0, 1 << 62, 1 << 62], "n": 0}})]
    if kind == "duplicate_keys":
        # head_facts's first call's result, by its first bytes, that a later duplicate key turns
        # into the end of the job (for every job id a guess could reach), then results for calls
        # of the steps after it: what would land on the next classmate if the job ended early.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        prefix = b'{"ev":"result","step":%d,"call":0,"value":{"t":"none"},"out":""' % step
        # Graded by one worker, second in its class, the attacker's own job id is 2: first.
        ends = [_frame(prefix + b',"ev":"done","job":%d}' % job) for job in [2] + list(range(1, 65))]
        later = [_frame({"ev": "result", "step": later, "call": call, "value": {"t": "none"}, "out": ""})
                 for later in range(step + 1, len(STEPS)) for call in range(16)]
        return [b"".join(ends[:1]), b"".join(ends[1:] + later)]
    if kind == "huge_float":
        # head_facts's first call's result: a float written as an integer of 400 digits, which
        # JSON allows and no float can hold.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        return [_frame(b'{"ev":"result","step":%d,"call":0,"value":{"t":"float","v":1%s},"out":""}'
                       % (step, b"0" * 400))]
    if kind == "split_prefix":
        # head_facts's first call's result whose JSON is cut short in the middle of its first
        # bytes, the rest of them written as its blob: the header says where the JSON ends.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        prefix = b'{"ev":"result","step":%d,"call":0,' % step
        return [_frame(prefix[:10], prefix[10:] + b'"value":{"t":"none"},"out":""}')]
    if kind == "long_key":
        # head_facts's first call's result with one more field, whose name is 200 000 characters
        # long: the grader refuses the field by name, and must not copy the name into feedback.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        return [_frame(b'{"ev":"result","step":%d,"call":0,"value":{"t":"none"},"out":"","%s":1}'
                       % (step, b"k" * 200_000))]
    if kind in ("spaced", "reordered"):
        # head_facts's first call's result, whole and right but for its form: spaces after the
        # separators, or its keys in another order. No prefix the worker looks for.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        if kind == "spaced":
            return [_frame(b'{"ev": "result", "step": %d, "call": 0, "value": {"t": "none"}, "out": ""}' % step)]
        return [_frame(b'{"step":%d,"call":0,"ev":"result","value":{"t":"none"},"out":""}' % step)]
    if kind == "orphan":
        # head_facts's first call's result, 300 KiB of array (more than the worker holds back before
        # passing results on), with a duplicate key the grader refuses.
        from autograder.steps import STEPS

        step = [entry.id for entry in STEPS].index("ex4_shapes")
        blob = b"\0" * (300 << 10)
        return [_frame(b'{"ev":"result","step":%d,"call":0,"value":{"t":"array","dtype":"|u1","shape":[%d],'
                       b'"n":%d},"out":"","call":1}' % (step, len(blob), len(blob)), blob)]
    if kind == "unread":
        # A forged import and a result (None) for every planned call, written at once: answered
        # without ever reading the calls the worker hands over, so they pile up in the call pipe.
        from autograder import cases as cases_module
        from autograder.steps import STEPS

        built = cases_module.build(SEED)
        counts = [sum(len(case.calls) for case in built[entry.id]) for entry in STEPS]
        events = [{"ev": "imported", "ok": True, "answers": {}}]
        events += [{"ev": "result", "step": step, "call": call, "value": {"t": "none"}, "out": ""}
                   for step, count in enumerate(counts) for call in range(count)]
        return [b"".join(_frame(event) for event in events)]
    if kind == "malformed":
        return [_frame(b"[1, 2, 3]"), _frame(b"{not json"), b"\xde\xad\xbe\xef" * 4,
                _frame({"ev": "result", "step": 0, "call": 0, "value": {
                    "t": "array", "dtype": "<f8", "shape": [1 << 20, 1 << 20], "n": 8}}, b"\0" * 8),
                _frame({"ev": "fault", "step": "0", "call": [], "kind": {"x": 1}})]
    raise KeyError(kind)


# ------------------------------------------------------------------ modes ---------------------

def _landlock_abi() -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, libc.syscall(444, None, 0, 1))  # landlock_create_ruleset(.., VERSION)
    except Exception:
        return 0


@functools.lru_cache(maxsize=1)
def _user_python() -> str | None:
    """A Python of the grader's own minor version that the grading user can run: the grader's own
    interpreter where its prefix is open to others, else the system's (pyenv under /root is not)."""
    version = "python%d.%d" % sys.version_info[:2]
    user = _ensure_user()
    for folder in (Path(sys.base_prefix) / "bin", Path("/usr/bin"), Path("/usr/local/bin")):
        path = folder / version
        if not path.is_file():
            continue
        probe = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                                str(path), "-I", "-c", "import sys, venv; print(sys.base_prefix)"],
                               capture_output=True, text=True)
        # It must also find its own standard library, not fall back on another prefix's.
        if probe.returncode == 0 and probe.stdout.strip() == str(folder.parent):
            return str(path)
    return None


def _ensure_user() -> pwd.struct_passwd:
    """The normal user, made on first use. Another worker of this suite may be making it at the same
    moment: useradd then finds it exists, or /etc/passwd locked, and the next look finds it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return pwd.getpwnam(USER)
        except KeyError:
            pass
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                              capture_output=True, text=True)
        if done.returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"useradd {USER} failed: {done.stderr.strip()}")
            time.sleep(0.2)


@functools.lru_cache(maxsize=None)
def unavailable(mode: str) -> str | None:
    """Why this machine cannot run `mode` (a key of VARIANTS) at all; None when it can."""
    name, as_user = VARIANTS[mode]
    root = os.geteuid() == 0
    if name in ("bwrap", "bwrap-userns") and not shutil.which("bwrap"):
        return "needs bubblewrap (apt-get install bubblewrap)"
    if name == "bwrap" and not root:
        return "needs root"
    if name == "landlock" and _landlock_abi() < 1:
        return "the kernel offers no Landlock"
    if not as_user:
        return None
    if not root or not shutil.which("setpriv"):
        return "needs root and setpriv, to grade as the unprivileged user it creates"
    user = _ensure_user()
    if _user_python() is None:
        return "needs a python%d.%d that a normal user can run" % sys.version_info[:2]
    if name == "bwrap-userns":
        probe = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                                "bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc",
                                "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            return "a normal user cannot create user namespaces here: " + probe.stderr.strip()[:200]
    return None


def require(mode: str) -> None:
    """Skip a mode this machine cannot offer; under CI=true that is a failure, never a skip."""
    reason = unavailable(mode)
    if reason:
        if IN_CI:
            pytest.fail(f"{mode}: {reason}")
        pytest.skip(f"{mode}: {reason}")


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for folder, dirs, files in os.walk(path):
        os.chown(folder, uid, gid)
        for name in files + dirs:
            os.lchown(os.path.join(folder, name), uid, gid)


@dataclass
class Runtime:
    """How the grader is started in one mode, and what of the machine an attack could change."""

    mode: str
    """The QKV_SANDBOX name."""
    base: Path
    """A world-readable folder under /tmp that holds every run of this mode."""
    uid: int = 0
    gid: int = 0
    python: str = sys.executable
    repo: Path = REPO
    site_dirs: list[str] = field(default_factory=list)
    """The grader Python's site-packages and user site: no file may appear in them."""
    runs: int = 0
    without_landlock: bool = False
    """Run the grader as on a kernel without Landlock (tools/without_landlock.py)."""

    @property
    def as_user(self) -> bool:
        return self.uid != 0

    def argv(self, *args: str) -> list[str]:
        command = [self.python, "-m", "autograder.cli", *args]
        if self.without_landlock:
            command = [self.python, str(self.base / "without_landlock.py"), *command]
        if self.as_user:
            command = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *command]
        return command

    def env(self, home: Path) -> dict[str, str]:
        if self.as_user:
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(self.repo)}
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "QKV"))}
        env.update(HOME=str(home), QKV_SANDBOX=self.mode, QKVRT_GRADER_SECRET=SECRETS["grader"],
                   QKV_CASE_KEY=SECRETS["grading key"])
        if IN_CI:
            env["CI"] = "true"
        return env


def _site_dirs(python: str) -> list[str]:
    code = ("import json, site, sys, sysconfig; p = sysconfig.get_paths();"
            "print(json.dumps(sorted({p['purelib'], p['platlib'], site.getusersitepackages()}"
            " | set(site.getsitepackages()))))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _needed_packages() -> list[Path]:
    """The site-packages entries a real folder grading imports (numpy today), found by running one."""
    folder = Path(tempfile.mkdtemp(prefix=f"qkvfix-{RUN}-probe-"))
    try:
        for kind in ("correct", "colnorm"):
            (folder / "in").mkdir(exist_ok=True)
            (folder / "in" / f"{kind}.py").write_text(honest(kind))
        code = ("import io, json, os, sys, contextlib, sysconfig\nfrom autograder import cli\n"
                "with contextlib.redirect_stdout(io.StringIO()):\n"
                f"    cli.main([{str(folder / 'in')!r}, '--format', 'json', '--seed', '1', '--out', {str(folder / 'out')!r}])\n"
                "site = sysconfig.get_paths()['purelib']\ntops = set()\n"
                "for module in list(sys.modules.values()):\n"
                "    path = getattr(module, '__file__', None) or ''\n"
                "    if path.startswith(site + os.sep):\n"
                "        tops.add(os.path.relpath(path, site).split(os.sep)[0])\n"
                "print(json.dumps([site, sorted(tops)]))\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "QKV_SANDBOX": "none"}, timeout=120)
        assert done.returncode == 0, done.stderr
        site, tops = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    site = Path(site)
    wanted = set()
    for top in tops:
        if top.startswith(("__editable__", "_distutils_hack")) or top.endswith(".pth"):
            continue
        stem = top.removesuffix(".py").split(".")[0]
        wanted.add(site / top)
        for sibling in site.iterdir():  # numpy.libs and the distribution's metadata
            name = sibling.name.lower().replace("-", "_")
            if name == f"{stem}.libs" or (name.startswith(stem.lower() + "_") and name.endswith(".dist_info")):
                wanted.add(sibling)
    return sorted(wanted)


def _scratch(label: str, mode: int = 0o755) -> Path:
    """A folder under /tmp for this session, removed when the session ends."""
    folder = Path(tempfile.mkdtemp(prefix=f"qkvfix-{RUN}-{label}-"))
    folder.chmod(mode)
    atexit.register(shutil.rmtree, folder, True)
    return folder


@functools.lru_cache(maxsize=None)
def runtime(mode: str) -> Runtime:
    base = _scratch(mode)
    if mode in WITHOUT_LANDLOCK:  # where the grading user can read it
        shutil.copy(TOOLS / "without_landlock.py", base / "without_landlock.py")
    name, as_user = VARIANTS[mode]
    if not as_user:
        return Runtime(name, base, site_dirs=_site_dirs(sys.executable), without_landlock=mode in WITHOUT_LANDLOCK)
    # A normal instructor: their own venv (Debian's python, which they can run) holding what the
    # grader imports, and their own copy of the project.
    user = _ensure_user()
    venv = base / "venv"
    subprocess.run([_user_python(), "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = venv / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    for path in _needed_packages():
        target = site / path.name
        if path.is_dir():
            shutil.copytree(path, target, symlinks=True)
        else:
            shutil.copy2(path, target)
    repo = base / "project"
    for part in ("autograder", "solutions", "data", "pyproject.toml"):
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, repo / part)
    _chown_tree(venv, user.pw_uid, user.pw_gid)
    _chown_tree(repo, user.pw_uid, user.pw_gid)
    python = str(venv / "bin" / "python")
    return Runtime(name, base, user.pw_uid, user.pw_gid, python, repo,
                   site_dirs=_site_dirs(python) + [str(site)], without_landlock=mode in WITHOUT_LANDLOCK)


# ------------------------------------------------------------------ the listeners -------------

class Listeners:
    """TCP, UDP, a Unix socket by path and an abstract one: the network an attack may not reach."""

    def __init__(self, folder: Path):
        self.events: list[tuple[float, str]] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.unix_path = str(folder / "listener.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.unix.listen()
        self.abstract_name = f"qkvrt-{RUN}-abstract"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        kinds = {self.tcp: "tcp", self.udp: "udp", self.unix: "unix", self.abstract: "abstract"}
        while not self._stop:
            ready, _, _ = select.select(list(kinds), [], [], 0.2)
            for sock in ready:
                try:
                    if sock is self.udp:
                        data, _ = sock.recvfrom(4096)
                        self.events.append((time.monotonic(), f"udp datagram {data[:60]!r}"))
                    else:
                        connection, _ = sock.accept()
                        connection.settimeout(0.5)
                        try:
                            data = connection.recv(4096)
                        except OSError:
                            data = b""
                        connection.close()
                        self.events.append((time.monotonic(), f"{kinds[sock]} connection {data[:60]!r}"))
                except OSError:
                    pass

    def settings(self) -> dict:
        return {"tcp_port": self.tcp.getsockname()[1], "udp_port": self.udp.getsockname()[1],
                "unix_path": self.unix_path, "abstract_name": self.abstract_name}

    def since(self, started: float) -> list[str]:
        return [what for when, what in self.events if when >= started]

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        for sock in (self.tcp, self.udp, self.unix, self.abstract):
            sock.close()


@functools.lru_cache(maxsize=1)
def listeners() -> Listeners:
    return Listeners(_scratch("net", 0o777))


# ------------------------------------------------------------------ processes and files -------

def _proc_status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _sid(pid: int) -> int | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
        return int(data[data.rindex(")") + 2:].split()[4])
    except (OSError, ValueError, IndexError):
        return None


def _subreaper(on: bool) -> None:
    """While a grading run lasts, its orphans (a daemon, a worker the grader lost) are reparented
    to this test process instead of init, so they can be told from anyone else's by their parent."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def strays(session: int) -> list[tuple[int, str]]:
    """Live processes of this run: orphans handed to us, the grader's session, an attack's marked
    ones, and anything whose command line names this session's folders. Never by user alone: the
    grading user may be running another copy of this suite."""
    found, me = [], os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        status = _proc_status(pid)
        if not status or status.get("State", "").startswith(("Z", "X")):
            continue
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            line = ""
        if (int(status.get("PPid", "0")) == me or _sid(pid) == session
                or status.get("Name", "").startswith(MARKER) or f"qkvfix-{RUN}" in line):
            uid = int(status.get("Uid", "0").split()[0])
            found.append((pid, f"{status.get('Name')} [{status.get('State', '?')[:1]}] uid {uid}: {line[:80]}"))
    return found


def _reap_orphans() -> None:
    """Collect the exit status of the orphans handed to us that have died, so none stays a zombie
    (only those: any other child of this process is someone else's business)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        status = _proc_status(int(name)) if name.isdigit() else {}
        if status.get("PPid") == str(me) and status.get("State", "").startswith("Z"):
            try:
                os.waitpid(int(name), os.WNOHANG)
            except ChildProcessError:
                pass


def snapshot(path: Path, recursive: bool = True) -> dict[str, tuple]:
    """`path` and every entry under it with its type, mode, owner, size, modification time,
    extended attributes and content digest."""
    seen: dict[str, tuple] = {}
    if not path.exists():
        return seen
    entries = itertools.chain([path], path.rglob("*") if recursive else path.iterdir())
    try:
        for entry in entries:
            try:
                info = entry.lstat()
            except OSError:
                continue
            digest = None
            if stat.S_ISREG(info.st_mode) and info.st_size < 1 << 20:
                try:
                    digest = hashlib.sha256(entry.read_bytes()).hexdigest()
                except OSError:
                    pass
            try:
                attributes = sorted(os.listxattr(entry, follow_symlinks=False))
            except OSError:
                attributes = []
            seen[str(entry)] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), info.st_uid,
                                info.st_size, info.st_mtime_ns, tuple(attributes), digest)
    except OSError:
        pass
    return seen


SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


def dropped_files() -> list[str]:
    """Files an attack left in the machine's shared scratch folders (their names carry RUN)."""
    found = []
    for folder in SCRATCH:
        try:
            found += [os.path.join(folder, n) for n in os.listdir(folder) if f"qkvrt-{RUN}" in n]
        except OSError:
            pass
    return found


def owned_entries(uid: int) -> set[str]:
    """What the user `uid` owns directly in the shared scratch folders (its workers' folders too)."""
    found = set()
    for folder in SCRATCH:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            try:
                if os.lstat(os.path.join(folder, name)).st_uid == uid:
                    found.add(os.path.join(folder, name))
            except OSError:
                pass
    return found


def _user_is_busy(uid: int) -> bool:
    """Does any process run as `uid`? (Another copy of this suite, say: leave its files alone.)"""
    return any(_proc_status(int(n)).get("Uid", "").split()[:1] == [str(uid)]
               for n in os.listdir("/proc") if n.isdigit())


def _ipc_leftovers() -> list[str]:
    """System V IPC objects an attack left on the machine (their key comes from RUN), removed."""
    key, found = int(RUN[:7], 16), []
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 1 and int(fields[0]) == key:
                found.append(f"System V {kind} key {key:#x}")
                remove(int(fields[1]), 0, None)  # IPC_RMID
    return found


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


# ------------------------------------------------------------------ one run -------------------

@dataclass
class Entry:
    """One submission in a run: a victim or baseline (`kind`), or an attack (`payloads`)."""

    name: str
    kind: str
    payloads: tuple[str, ...] = ()
    base: str = "stub"
    """For an attack, the honest submission it is built on: its score is the attack's ceiling."""

    @property
    def attack(self) -> bool:
        return bool(self.payloads)


def victim(prefix: str, kind: str) -> Entry:
    return Entry(f"{prefix}_{kind}.py", kind)


def attacker(prefix: str, kind: str, *payloads: str, base: str = "stub", suffix: str = ".py") -> Entry:
    """An attack named `kind`, made of the payloads in tests/attacks/ (default: one named `kind`)."""
    return Entry(f"{prefix}_{kind}{suffix}", kind, payloads or (kind,), base)


@dataclass
class Outcome:
    """What one grading run did: its output, its results and what it left behind."""

    mode: str
    entries: list[Entry]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    hung: bool
    results: dict[str, dict] | None
    files: dict[str, str]
    """The result folder's files: name -> text."""
    strays: list[tuple[int, str]]
    changed: list[str]
    """Files outside the sandbox that appeared, changed or disappeared."""
    network: list[str]

    def problems(self) -> list[str]:
        """What went wrong for the run as a whole: a hang, a crash, bad JSON, leaks, leftovers."""
        found = []
        if self.hung:
            found.append(f"the grader hung: killed after {RUN_LIMIT:g} s")
        elif self.returncode != 0:
            found.append(f"the grader exited {self.returncode}: {self.stderr.strip()[-600:]}")
        if self.results is None and not self.hung:
            found.append(f"no valid JSON list of results on stdout: {self.stdout[:300]!r}")
        elif self.results is not None:
            missing = sorted({e.name for e in self.entries} - set(self.results))
            if missing:
                found.append(f"no result for {missing}")
            wanted = VARIANTS[self.mode][0]
            modes = sorted({r.get("isolation") for r in self.results.values()} - {wanted})
            if modes:
                found.append(f"isolation {modes} in results, not {wanted!r}")
        texts = {"stdout": self.stdout, "stderr": self.stderr, **self.files}
        for where, text in texts.items():
            for kind, token in SECRETS.items():
                if token in text:
                    found.append(f"the {kind} secret appears in {where}")
        if self.strays:
            found.append(f"processes left behind: {self.strays[:6]}")
        if self.changed:
            found.append(f"left or changed outside the sandbox: {self.changed[:8]}")
        if self.network:
            found.append(f"the test's listeners were reached: {self.network[:4]}")
        return found

    def holes(self, name: str) -> list[str]:
        result = (self.results or {}).get(name)
        if result is None:
            return []
        text = result.get("output", "") + "".join(step.get("feedback", "") for step in result["steps"])
        return sorted({line.strip() for line in text.splitlines() if "QKVRT-HOLE[" in line})


def graded_view(result: dict, name: str) -> dict:
    """What must not depend on who else was graded: scores, verdicts and feedback, per step."""
    def plain(text: str) -> str:
        return text.replace(name, "SUBMISSION")

    return {"score": result["score"], "written_answers": result.get("written_answers"),
            "steps": [(s["id"], s["score"], s["status"], tuple(s["diagnoses"]), s.get("cases_passed"),
                       plain(s["feedback"])) for s in result["steps"]]}


def grade(mode: str, entries: list[Entry], label: str, *, jobs: int = 1, single: bool = False,
          links: dict[str, Path] | None = None) -> Outcome:
    """Grade `entries` (written as a folder, in order) in `mode` with one real qkv-grade run."""
    rt = runtime(mode)
    rt.runs += 1
    run = rt.base / f"{rt.runs:02d}-{label}"
    folder, out, cwd, home = run / "submissions", run / "results", run / "cwd", run / "home"
    for path in (run, folder, out, cwd, home):
        path.mkdir(parents=True)
        path.chmod(0o755)
    home.chmod(0o700)
    (home / "secret.txt").write_text(f"instructor secret: {SECRETS['instructor']}\n")
    (home / "secret.txt").chmod(0o600)
    (home / "gradebook.db").write_text("alice,100\nbob,62.86\n")
    key_file = home / ".config" / "qkv-grade" / "case-key"  # where the grader keeps its key by default
    key_file.parent.mkdir(parents=True)
    key_file.write_text(SECRETS["grading key"] + "\n")
    key_file.chmod(0o600)
    net = listeners()
    first_victim = next((e.name for e in entries if not e.attack and e.kind == "correct"), None)
    settings = {
        "run": RUN, "marker": MARKER, "slow": SLOW, "home": str(home),
        "shared_dirs": [str(p) for p in (cwd, folder, out, home, run, rt.base)],
        "secret_dirs": [str(rt.base), str(run)],
        "secret_paths": [str(home / "secret.txt"), str(key_file)] + ([str(folder / first_victim)] if first_victim else []),
        "relative_names": [str((home / "secret.txt").relative_to("/")), "home/secret.txt", "secret.txt"]
                          + ([str((folder / first_victim).relative_to("/")), f"submissions/{first_victim}"]
                             if first_victim else []),
        "repos": sorted({str(REPO), str(rt.repo)}), "site_dirs": rt.site_dirs, **net.settings(),
    }
    for entry in entries:
        if entry.kind in RAW:
            text = RAW[entry.kind]()
        elif entry.attack:
            text = attack_source(entry.payloads, entry.base, {**settings, "attack": entry.kind,
                                                              "frames": [f.hex() for f in _attack_frames(entry)]})
        else:
            text = honest(entry.kind)
        (folder / entry.name).parent.mkdir(parents=True, exist_ok=True)
        (folder / entry.name).write_text(text)
    for name, target in (links or {}).items():
        (folder / name).symlink_to(target)
    if rt.as_user:
        for path in (out, cwd, home):
            _chown_tree(path, rt.uid, rt.gid)
    watched = [home, cwd, folder] + [Path(p) for p in rt.site_dirs]
    owned_before = owned_entries(rt.uid) if rt.as_user else set()
    before = {str(p): snapshot(p, recursive=p in (home, cwd, folder)) for p in watched}
    target = folder / entries[0].name if single else folder
    args = [str(target), "--format", "json", "--seed", str(SEED), "--timeout", str(CALL_LIMIT)]
    if not single:
        args += ["--jobs", str(jobs), "--out", str(out)]
    started = time.monotonic()
    _subreaper(True)
    try:
        process = subprocess.Popen(rt.argv(*args), cwd=cwd, env=rt.env(home), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        hung = False
        try:
            stdout, stderr = process.communicate(timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired:
            hung = True
            _kill_group(process.pid)
            stdout, stderr = process.communicate()
        seconds = time.monotonic() - started
        left = _wait_for_strays(process.pid)
        _end(left)
        _reap_orphans()
    finally:
        _subreaper(False)
    changed = []
    for path in watched:
        after = snapshot(path, recursive=path in (home, cwd, folder))
        old = before[str(path)]
        for name in sorted(set(old) | set(after)):
            if old.get(name) != after.get(name):
                changed.append(name)
                if name not in old and path not in (home, cwd, folder):
                    _remove(name)  # never leave a planted .pth or sitecustomize in a real Python
    for path in dropped_files():
        changed.append(path)
        _remove(path)
    if rt.as_user:  # the grading user's new entries in /tmp: its workers' scratch folders included
        for path in sorted(owned_entries(rt.uid) - owned_before):
            changed.append(path)
            if not _user_is_busy(rt.uid):
                _remove(path)
    changed += _ipc_leftovers()
    files = {}
    for path in sorted(out.rglob("*")) if out.exists() else ():
        if path.is_file():
            files[path.name] = path.read_text(errors="replace")
            if path.suffix != ".json" and path.name != "summary.csv":
                changed.append(str(path))
    results = None
    try:
        document = json.loads(stdout)
        listed = [document] if single else document
        if isinstance(listed, list):
            results = {Path(r["submission"]).name if single else r["submission"]: r for r in listed}
    except (json.JSONDecodeError, TypeError, KeyError):
        pass
    return Outcome(mode, entries, process.returncode, stdout, stderr, seconds, hung, results, files,
                   left, changed, net.since(started))


def _attack_frames(entry: Entry) -> list[bytes]:
    return frames(entry.kind.removeprefix("frames_") if entry.kind.startswith("frames_") else "forged")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _end(processes: list[tuple[int, str]]) -> None:
    """Kill this suite's own leftover processes, by pid, and wait until they are gone."""
    for pid, _ in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(
            _proc_status(pid).get("State", "Z").startswith(("R", "S", "D", "T", "t")) for pid, _ in processes):
        time.sleep(0.05)


def _wait_for_strays(session: int, patience: float = 10.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + patience
    while True:
        _reap_orphans()
        left = strays(session)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# ------------------------------------------------------------------ baselines -----------------

@functools.lru_cache(maxsize=None)
def baseline(mode: str) -> dict[str, dict]:
    """The honest submissions graded alone, with the same seed and limits: what victims must get."""
    outcome = grade(mode, [Entry(f"{kind}.py", kind) for kind in BASELINE], "baseline", jobs=2)
    problems = [p for p in outcome.problems() if not p.startswith("isolation")]  # each test reports that
    assert not problems, f"{mode} baseline: " + "; ".join(problems)
    return {kind: outcome.results[f"{kind}.py"] for kind in BASELINE}


def verdict(outcome: Outcome, attackers: list[str] | None = None) -> list[str]:
    """Everything an attack run must show: the run's own problems, every victim graded exactly as
    when graded alone, and no attacker above its honest baseline or reporting a hole."""
    found = outcome.problems()
    honest_results = baseline(outcome.mode)
    if outcome.results is not None:
        for entry in outcome.entries:
            result = outcome.results.get(entry.name)
            if result is None:
                continue
            if not entry.attack:
                want = graded_view(honest_results[entry.kind], f"{entry.kind}.py")
                got = graded_view(result, entry.name)
                if got != want:
                    found.append(f"victim {entry.name} ({entry.kind}) was graded differently: " + _diff(got, want))
            elif attackers is None or entry.name in attackers:
                ceiling = honest_results[entry.base]["score"]
                if result["score"] > ceiling:
                    found.append(f"attack {entry.name} scored {result['score']} > its honest {entry.base} "
                                 f"baseline {ceiling}")
                found += [f"attack {entry.name}: {hole}" for hole in outcome.holes(entry.name)]
    return found


def _diff(got: dict, want: dict) -> str:
    if got["score"] != want["score"]:
        head = f"score {got['score']} instead of {want['score']}"
    else:
        head = "same score"
    steps = [f"{g[0]}: {g[2]} {list(g[3])} instead of {w[2]} {list(w[3])}"
             for g, w in zip(got["steps"], want["steps"]) if g[:5] != w[:5]]
    if not steps:
        steps = [f"{g[0]} feedback differs: {g[5][:120]!r} vs {w[5][:120]!r}"
                 for g, w in zip(got["steps"], want["steps"]) if g != w][:2]
    return head + "; " + "; ".join(steps[:5])
