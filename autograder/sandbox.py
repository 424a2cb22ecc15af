"""Where a submission runs: the sandbox modes, what each guarantees, and the one place that picks one.

Every mode runs submissions in workers (see `inside.py`), never in the grader's process, and in
every sealed mode each submission's own process also seals itself: pipes of its own and no
inherited descriptor, a fresh scratch folder, hard limits, no new privileges, seccomp (no sockets,
processes, exec, ptrace or signals out) and, where the kernel has it, Landlock (read only Python,
numpy and shared libraries; write only its scratch folder). The modes differ in what surrounds the
worker.

`choose()` takes the strongest mode this machine offers, or the one QKV_SANDBOX names (auto, bwrap,
bwrap-userns, landlock, none). Where no sealed mode works it refuses, with a line saying what to
install or enable; `none` (the command line's --no-sandbox) grades anyway and every result says so.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

INSIDE = Path(__file__).with_name("inside.py")
PROTOCOL = Path(__file__).with_name("protocol.py")
_LIB, _SITE = "/qkv/lib", "/qkv/site"
# A worker imports inside.py rather than running it as a script, so that its bytecode is read from
# __pycache__ like any module's instead of being compiled again at every start.
_BOOT = "import sys; sys.path.insert(0, %r); import inside; del sys.path[0]; inside.main()"
SCRATCH_BYTES = 256 << 20
"""Size of a bubblewrap worker's /tmp, where its submissions' scratch folders live."""


@dataclass(frozen=True)
class Mode:
    """One sandbox mode: what surrounds the worker, and what that adds to the child's own seal."""

    name: str
    summary: str
    sees: str
    network: str
    processes: str
    identity: str
    needs: str
    seal: str = "full"
    """"full": each submission's process seals itself (seccomp, Landlock where present)."""
    landlock_required: bool = False


MODES = {mode.name: mode for mode in (
    Mode("bwrap", "bubblewrap as root",
         sees="a private root: system libraries, Python's standard library and numpy, read-only; "
              "an empty /tmp of its own",
         network="none (its own network namespace)",
         processes="its own PID namespace; none outlive the worker",
         identity="uid/gid 65534 (nobody)",
         needs="root and the bwrap command (apt-get install bubblewrap)"),
    Mode("bwrap-userns", "bubblewrap as a normal user, through user namespaces",
         sees="as with bwrap",
         network="none (its own network namespace)",
         processes="its own PID namespace; none outlive the worker",
         identity="the instructor's uid, with no capabilities, inside its own user namespace",
         needs="the bwrap command and unprivileged user namespaces"),
    Mode("landlock", "Landlock, seccomp and resource limits, without namespaces",
         sees="through Landlock only: Python's standard library, numpy, shared libraries, its scratch folder "
              "(elsewhere, names and metadata through stat, never contents)",
         network="none (seccomp refuses sockets; Landlock refuses TCP)",
         processes="cannot start any (seccomp)",
         identity="the instructor's uid; as root, nobody (or uid 0 without capabilities where nobody "
                  "cannot read Python)",
         needs="Linux 5.13 or newer with Landlock enabled, and seccomp",
         landlock_required=True),
    Mode("none", "no sandbox (--no-sandbox)",
         sees="everything the grader's user can see",
         network="the grader's",
         processes="may start processes",
         identity="the instructor's uid; as root, nobody (or uid 0 without capabilities)",
         needs="nothing",
         seal="none"),
)}
AUTO_ORDER = ("bwrap", "bwrap-userns", "landlock")


class SandboxUnavailable(RuntimeError):
    pass


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


_probes: dict[str, subprocess.Popen] = {}


def _probe_argv(name: str) -> list[str]:
    return ["bwrap", *(["--unshare-user"] if name == "bwrap-userns" else []), "--unshare-net",
            "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]


def prewarm() -> None:
    """Start the bubblewrap probe `choose()` will need, so it runs while the grader loads."""
    if os.environ.get("QKV_SANDBOX", "auto") in ("auto", "bwrap", "bwrap-userns") and sys.platform.startswith("linux") \
            and shutil.which("bwrap") is not None:
        name = "bwrap" if _root() and os.environ.get("QKV_SANDBOX") != "bwrap-userns" else "bwrap-userns"
        try:
            _probes[name] = subprocess.Popen(_probe_argv(name), stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError:
            pass


@functools.lru_cache(maxsize=None)
def available(name: str) -> str | None:
    """None when mode `name` works here; otherwise why not, in a few words."""
    if name == "none":
        return None
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if name in ("bwrap", "bwrap-userns"):
        if shutil.which("bwrap") is None:
            return "the bwrap command is missing (apt-get install bubblewrap)"
        if name == "bwrap" and not _root():
            return "needs root"
        try:
            started = _probes.pop(name, None)
            if started is not None:
                _, stderr = started.communicate(timeout=20)
                done = subprocess.CompletedProcess(started.args, started.returncode, b"", stderr)
            else:
                done = subprocess.run(_probe_argv(name), capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap did not start ({exc})"
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            return "bwrap could not make its namespaces" + (f" ({reason[-1]})" if reason else "")
        return None
    if name == "landlock":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        if abi < 1:
            return "the kernel has no Landlock (Linux 5.13+, with landlock in the lsm= boot list)"
        if os.uname().machine not in ("x86_64", "aarch64"):
            return f"no seccomp table for {os.uname().machine}"
        if libc.prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP
            return "the kernel has no seccomp"
        return None
    return "unknown mode"


def choose(wanted: str | None = None) -> str:
    """The mode to grade in: QKV_SANDBOX's (default auto: the strongest available), or refuse."""
    wanted = wanted or os.environ.get("QKV_SANDBOX") or "auto"
    if wanted != "auto" and wanted not in MODES:
        raise SandboxUnavailable(f"QKV_SANDBOX={wanted}: use one of auto, {', '.join(MODES)}")
    if wanted != "auto":
        problem = available(wanted)
        if problem:
            raise SandboxUnavailable(f"sandbox mode {wanted} is not available here: {problem}")
        return wanted
    reasons = []
    for name in AUTO_ORDER:
        problem = available(name)
        if problem is None:
            return name
        reasons.append(f"{name}: {problem}")
    raise SandboxUnavailable("no sandbox is available (" + "; ".join(reasons) + "). Install bubblewrap, "
                             "enable unprivileged user namespaces or Landlock, or pass --no-sandbox to "
                             "grade without isolation")


def isolation() -> str:
    """The mode in force, as recorded in every result."""
    return choose()


# ---------------------------------------------------------------- starting a worker ----------


def _numpy_dir() -> Path:
    spec = importlib.util.find_spec("numpy")
    return Path(spec.submodule_search_locations[0]).resolve()


def _hidden_paths(bound: list[Path]) -> list[Path]:
    """Folders inside the bound tree that must look empty: site-packages and the grader itself."""
    paths = sysconfig.get_paths()
    candidates = {Path(paths["purelib"]), Path(paths["platlib"])}
    candidates |= {Path(p) for p in sys.path if p and "-packages" in p}
    here = Path(__file__).resolve().parent
    candidates |= {here, here.parent}
    hidden = []
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    for path in sorted(candidates):
        path = path.resolve() if path.exists() else path
        if not path.is_dir() or path == stdlib or stdlib.is_relative_to(path):
            continue
        if any(path.is_relative_to(root) for root in bound):
            hidden.append(path)
    return hidden


def _thread_env() -> dict[str, str]:
    env = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # some CPUs need these to run OpenBLAS
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def worker_command(mode: str, channel: tuple[int, int]) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start one worker; it speaks `protocol.py` on `channel`, the
    descriptors (inherited, above the standard three) it reads jobs from and writes results to."""
    numpy = _numpy_dir()
    config = {"seal": MODES[mode].seal, "numpy": str(numpy), "channel": list(channel)}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **_thread_env()}
    if mode in ("landlock", "none"):
        if _root():  # never run a submission as root, even without a sandbox
            config["user"] = "nobody-if-readable"
        return [sys.executable, "-I", "-S", "-c", _BOOT % str(INSIDE.parent), json.dumps(config)], env

    prefix = Path(sys.base_prefix).resolve()
    python = Path(sys.executable).resolve()
    bound = [Path("/usr"), prefix]
    argv = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if mode == "bwrap-userns":
        argv += ["--unshare-user"]
    else:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        config["user"] = "nobody"
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        link = Path("/") / name
        if link.is_symlink():
            argv += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            argv += ["--ro-bind", str(link), str(link)]
            bound.append(link)
    if not prefix.is_relative_to(Path("/usr")):
        argv += ["--ro-bind", str(prefix), str(prefix)]
    if not any(python.is_relative_to(root) for root in bound):
        argv += ["--ro-bind", str(python), str(python)]
    for path in _hidden_paths(bound):
        argv += ["--tmpfs", str(path)]
    argv += ["--ro-bind", str(numpy), f"{_SITE}/numpy"]
    libs = numpy.with_name("numpy.libs")
    if libs.is_dir():
        argv += ["--ro-bind", str(libs), f"{_SITE}/numpy.libs"]
    argv += ["--ro-bind", str(INSIDE), f"{_LIB}/inside.py", "--ro-bind", str(PROTOCOL), f"{_LIB}/protocol.py"]
    for cached in _bytecode():  # no compiling at each start
        argv += ["--ro-bind", str(cached), f"{_LIB}/__pycache__/{cached.name}"]
    argv += [
             "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
             "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
             # Nothing but /tmp can be written, even by a child on a kernel without Landlock; and the
             # worker empties all of /tmp between children (config "private_tmp"), not only their folders.
             "--remount-ro", "/", "--remount-ro", "/dev",
             "--chdir", "/tmp", "--clearenv"]
    for name, value in {**env, "HOME": "/tmp"}.items():
        argv += ["--setenv", name, value]
    config["numpy"], config["private_tmp"] = f"{_SITE}/numpy", True
    return _with_open_parents(argv) + [str(python), "-I", "-S", "-c", _BOOT % _LIB, json.dumps(config)], env


def _bytecode() -> list[Path]:
    """The compiled inside.py and protocol.py, compiled now if they were not (where we may write)."""
    found = []
    for source in (INSIDE, PROTOCOL):
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.is_file():
            import py_compile

            try:
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
            except (OSError, py_compile.PyCompileError):
                continue
        found.append(cached)
    return found


def _with_open_parents(argv: list[str]) -> list[str]:
    """Create every parent of a mount point as 0755 first: bwrap would make them 0700, root's."""
    destination = {"--ro-bind": 2, "--ro-bind-try": 2, "--symlink": 2, "--tmpfs": 1}
    targets = [argv[i + destination[arg]] for i, arg in enumerate(argv) if arg in destination]
    parents = sorted({str(parent) for target in targets for parent in Path(target).parents
                      if str(parent) != "/"}, key=lambda p: p.count("/"))
    head = argv.index("--ro-bind")
    opened = [part for parent in parents for part in ("--perms", "0755", "--dir", parent)]
    return argv[:head] + opened + argv[head:]
