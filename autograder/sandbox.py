"""How a worker process is started: inside bubblewrap as an unprivileged user, or as a plain process.

As root with `bwrap` on the PATH (CI, Gradescope, an instructor's container), each worker gets a
private filesystem view holding only the system libraries, the Python standard library and numpy,
read-only, with an empty /tmp; its own network, PID, IPC and UTS namespaces (so no network at all);
and it drops to uid/gid 65534 (nobody) before it reads anything. The grader's package, the
reference solutions, the hidden cases, the data files and every submission other than the one it
is sent are not in its view.

Otherwise (not root, or no bwrap) a worker is a plain child process of the grader: the submission
still never runs in the grader's own process, time, memory and output are still capped, and only
plain data crosses back, but it can read what its user can read and has that user's network.
As root without bwrap it drops to uid/gid 65534 after loading numpy, so it is at least not root;
make the grader's files unreadable to others (`chmod -R o=`) to keep them from it. `isolation()` says which one is in force; it is recorded in results.

Set QKV_SANDBOX=none to force the plain mode, or QKV_SANDBOX=bwrap to fail rather than fall back.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

NOBODY = 65534
CHILD_SOURCE = Path(__file__).with_name("child.py")
_SITE = "/qkv/site"


class SandboxUnavailable(RuntimeError):
    pass


def isolation() -> str:
    wanted = os.environ.get("QKV_SANDBOX", "auto")
    if wanted == "none":
        return "process"
    usable = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("bwrap") is not None
    if wanted == "bwrap" and not usable:
        raise SandboxUnavailable("QKV_SANDBOX=bwrap, but bubblewrap needs root and the `bwrap` command")
    return "bwrap" if usable else "process"


def _numpy_dirs() -> list[Path]:
    spec = importlib.util.find_spec("numpy")
    package = Path(spec.submodule_search_locations[0]).resolve()
    dirs = [package]
    libs = package.with_name("numpy.libs")
    if libs.is_dir():
        dirs.append(libs)
    return dirs


def _python_prefix() -> Path:
    return Path(sys.base_prefix).resolve()


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


def worker_command() -> list[str]:
    """The argv that starts one worker; it speaks the frame protocol on stdin/stdout."""
    source = CHILD_SOURCE.read_text()
    if isolation() == "process":
        config = {"own_pid_namespace": False}
        if os.geteuid() == 0:  # never run a submission as root, even without a sandbox
            config.update(uid=NOBODY, gid=NOBODY, workdir="/")
        return [sys.executable, "-I", "-c", source, json.dumps(config)]

    prefix = _python_prefix()
    python = Path(sys.executable).resolve()
    bound = [Path("/usr"), prefix]
    argv = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
            "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        link = Path("/") / name
        if link.is_symlink():
            argv += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            argv += ["--ro-bind", str(link), str(link)]
            bound.append(link)
    if not any(prefix.is_relative_to(root) for root in bound[:1]):
        argv += ["--ro-bind", str(prefix), str(prefix)]
    if not any(python.is_relative_to(root) for root in bound):
        argv += ["--ro-bind", str(python), str(python)]
    for path in _hidden_paths(bound):
        argv += ["--tmpfs", str(path)]
    for path in _numpy_dirs():
        argv += ["--ro-bind", str(path), f"{_SITE}/{path.name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "LANG", "C.UTF-8"]
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        argv += ["--setenv", name, "1"]
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # some CPUs need these to run OpenBLAS
        if name in os.environ:
            argv += ["--setenv", name, os.environ[name]]
    config = {"uid": NOBODY, "gid": NOBODY, "path": [_SITE], "own_pid_namespace": True}
    return _with_open_parents(argv) + [str(python), "-I", "-S", "-c", source, json.dumps(config)]


def _with_open_parents(argv: list[str]) -> list[str]:
    """Create every parent of a mount point as 0755 first: bwrap would make them 0700, root's."""
    destination = {"--ro-bind": 2, "--symlink": 2, "--tmpfs": 1}
    targets = [argv[i + destination[arg]] for i, arg in enumerate(argv) if arg in destination]
    parents = sorted({str(parent) for target in targets for parent in Path(target).parents
                      if str(parent) != "/"}, key=lambda p: p.count("/"))
    head = argv.index("--ro-bind")
    opened = [part for parent in parents for part in ("--perms", "0755", "--dir", parent)]
    return argv[:head] + opened + argv[head:]


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    return env
