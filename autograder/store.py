"""The results folder of a graded class: one folder per run, complete or plainly marked as not.

    OUT/
      latest -> run-20261201-150102-seed42/      the last run that finished
      run-20261201-150102-seed42/                a finished run: run.json, summary.csv, one JSON
                                                 per submission
      run-20261201-153000-seed42.incomplete/     a run that has not finished (still going, killed,
                                                 interrupted, or its disk filled): run.json and the
                                                 results written so far; `--resume` finishes it

A run writes into its own `.incomplete` folder, each file through a temporary file and a rename,
so no reader ever sees half a file. It writes `summary.csv` last and then renames the folder, so a
folder without the suffix always holds every result of its run and a summary that lists exactly
those. No run writes into another's folder, so runs never mix.

Every open, write and rename here can fail (a full disk, a read-only folder); each raises OSError
for the caller to report in one line. Nothing here imports numpy.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

INCOMPLETE = ".incomplete"
MANIFEST = "run.json"
SUMMARY = "summary.csv"
LATEST = "latest"
_MAX_NAME = 200  # below every common file system's 255-byte limit, with room for the suffixes


def new_temporary(target: Path, mode: int = 0o600) -> tuple[Path, int]:
    """A new file beside `target`, made here and now, and open for writing: (its path, its descriptor).

    Its name is `.{target's name}.{pid}.{random}.tmp`, and it is made with O_EXCL: in a folder
    others may write (a sticky /tmp), a name planted there beforehand (a named pipe, a file of
    theirs, a link) is never opened, only passed over for another."""
    import secrets

    for _ in range(100):
        temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no new temporary name could be made", str(target.parent))


def write_atomically(target: Path, data: bytes | str | Iterable[str], mode: int = 0o644) -> None:
    """Write `target` whole or not at all: a temporary file beside it, flushed, then a rename.

    `data` may be pieces of text, written as they come (a class's summary, row by row). `mode`:
    the file's permissions (0o600 for one its owner alone may read), whatever the umask.
    A failure (a full disk, say) removes the temporary file and raises; `target` is untouched.
    Renaming replaces a symbolic link at `target` instead of writing through it.
    """
    pieces = [data] if isinstance(data, (bytes, str)) else data
    temporary, descriptor = new_temporary(target, mode)
    try:
        try:
            if mode != 0o644:  # exactly these rights, whatever the umask
                os.fchmod(descriptor, mode)
            for piece in pieces:
                view = memoryview(piece.encode("utf-8") if isinstance(piece, str) else piece)
                while view:
                    view = view[os.write(descriptor, view):]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def result_file(name: str) -> str:
    """The result file of the submission named `name` (its path relative to the folder graded).

    Every character but letters, digits, '.', '-' and '_' is percent-encoded ('/' too), so two
    different names never share a file (`a b.py` -> `a%20b.py.json`, `a_b.py` -> `a_b.py.json`)
    and the same name always gets the same one. A name too long for the file system keeps its
    start and gains a digest of the whole.
    """
    import hashlib

    encoded = urllib.parse.quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]  # never a hidden file, never our own temporary files
    if len(encoded) > _MAX_NAME:
        encoded = encoded[:_MAX_NAME - 17] + "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    return encoded + ".json"


def _a_manifest(manifest) -> bool:
    """Is `manifest` what a run's manifest holds, as far as resuming reads it (a run folder edited by
    hand, or by something else, is no run to take up)?"""
    return (isinstance(manifest, dict) and isinstance(manifest.get("source"), str)
            and isinstance(manifest.get("started"), (int, float)) and not isinstance(manifest.get("started"), bool)
            and type(manifest.get("seed")) is int and isinstance(manifest.get("options"), dict))


class RunBusy(Exception):
    """Another qkv-grade process is writing this run."""


class NothingToResume(Exception):
    """There is no unfinished run to resume; the message says what there is."""


class NotYours(Exception):
    """A folder the grader would write in that someone else could change; the message says why."""


def own_folder(folder: Path, what: str) -> None:
    """Make `folder` (readable by its owner alone when made here), or check the one there: a real
    folder, not a link, owned by this user and written by no one else, inside folders no one else
    can change (`changeable_above`). Everything qkv-grade writes
    below it goes by its path; in a folder a classmate may write (a shared drop folder graded in
    place, /tmp), they could swap a run folder for a link to another, plant a run to resume, or
    pin `latest`, with this user's rights. Raises NotYours, or OSError when it cannot be made."""
    above = changeable_above(folder)  # before anything is made there, and again once it is
    if above is None and not os.path.lexists(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
    above = above or changeable_above(folder)
    if above is not None:
        raise NotYours(f"{folder}: {above}, so they could move the {what} away and put a link to a folder of "
                       f"their choosing in its place while qkv-grade writes; name a {what} inside folders "
                       f"only you (or root) can change")
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise NotYours(f"{folder}: the {what} is {'a symbolic link' if stat.S_ISLNK(info.st_mode) else 'not a folder'};"
                       f" name a folder of your own")
    if info.st_uid != os.geteuid():
        raise NotYours(f"{folder}: the {what} belongs to another user (uid {info.st_uid}), who could change what "
                       f"is written there; name a folder of your own")
    if info.st_mode & 0o022:
        raise NotYours(f"{folder}: others may write in the {what} (mode {stat.S_IMODE(info.st_mode):o}), and so "
                       f"change what is written there; make it yours alone (chmod go-w) or name another")
    if _access_list(folder):
        raise NotYours(f"{folder}: the {what} has an access control list (`getfacl` shows it), which may let others "
                       f"write there; remove it (setfacl -b) or name another")


def changeable_above(folder: Path) -> str | None:
    """Why a folder above `folder` lets someone else rename what it holds, or None. Every folder on
    the way to it, as named and as its links resolve, must belong to this user or to root, and be
    written by no one else, or carry the sticky bit (as /tmp does: there only an entry's owner may
    rename it). A folder writable by its group passes where that group is this user's own, with no
    other member (a private group, as many systems give each user)."""
    for above, info in _folders_above(folder):
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid not in (os.geteuid(), 0):
            return f"{above} belongs to another user (uid {info.st_uid})"
        if mode & stat.S_ISVTX:
            continue
        if mode & 0o002 or (mode & 0o020 and not _private_group(info.st_gid)):
            return f"others may write in {above} (mode {mode:o})"
        if _access_list(above):  # its group bits are then the list's mask: named users may write
            return f"{above} has an access control list (`getfacl` shows it), which may let others write in it"
    return None


def _folders_above(path: Path):
    """(folder, its stat) of each folder on the way to `path` that exists, as named and as its links
    resolve, each once."""
    for above in dict.fromkeys([*Path(os.path.abspath(path)).parents, *Path(os.path.realpath(path)).parents]):
        try:
            yield above, os.stat(above)
        except OSError:
            continue


def course_problem(course: Path, config: str) -> str | None:
    """Why an nbgrader course's folder cannot be trusted, or None. nbgrader runs the course's
    `config` file as Python, with the rights of whoever grades, and the grades and feedback are
    written below the folder: the folder and that file must belong to this user or to root and be
    written by no one beyond its group (a course's staff may share one), and no folder on the way
    may be written by anyone without the sticky bit."""
    for path, what in ((course, "the course's folder"), (course / config, config)):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            continue
        if info.st_uid not in (os.geteuid(), 0):
            return f"{path}: {what} belongs to another user (uid {info.st_uid})"
        if info.st_mode & 0o002:
            return f"{path}: anyone may write in {what} (mode {stat.S_IMODE(info.st_mode):o})"
    for above, info in _folders_above(course):
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o002 and not mode & stat.S_ISVTX:
            return f"{course}: anyone may write in {above} (mode {mode:o}), above the course's folder"
    return None


def _access_list(path) -> bool:
    """Does `path` carry a POSIX access control list beyond its mode (named users or groups)?"""
    try:
        os.getxattr(path, "system.posix_acl_access")
    except (OSError, AttributeError):  # none, or none this file system or system keeps
        return False
    return True


def _private_group(gid: int) -> bool:
    """Is `gid` this user's own group, which no one else belongs to?"""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == os.getegid() and set(group.gr_mem) <= {user} and not any(
        entry.pw_gid == gid and entry.pw_uid != os.geteuid() for entry in _users())


def _users():
    import pwd

    try:
        return pwd.getpwall()
    except OSError:
        return []


def point_latest(out: Path) -> None:
    """Point `latest` at the newest finished run in `out` (by when it finished), and remove the
    link a run killed while switching it left behind. Every run does this as it starts, resumes
    and finishes, so a kill between a run's last rename and its switch is mended by the next run.

    Runs finishing at once take turns here (a lock on `out` itself, so no lock file sits among the
    runs): each looks for the newest run and switches the link in one turn, so a run that looked
    before another finished can never point `latest` back at an older run after it. Under the
    lock, every temporary link is a killed run's, and is removed."""
    with _latest_lock(out):
        _point_latest(out)


@contextlib.contextmanager
def _latest_lock(out: Path):
    """Hold the lock on `out` under which `latest` is switched (none where `out` cannot be opened)."""
    try:
        descriptor = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # and the lock with it


def _point_latest(out: Path) -> None:
    """Point `latest` at the run that finished last, of those this user made: a folder someone
    else put in a results folder they may write (a shared drop folder graded in place) is never
    the one `latest` shows."""
    newest = None
    for folder in out.glob("run-*"):
        try:
            info = folder.lstat()
        except OSError:
            continue
        if folder.name.endswith(INCOMPLETE) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            finished = float(manifest["finished"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if newest is None or (finished, folder.name) > newest:
            newest = (finished, folder.name)
    for stale in out.glob(f".{LATEST}.*.tmp"):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    if newest is None:
        return
    try:
        if os.readlink(out / LATEST) == newest[1]:
            return
    except OSError:
        pass
    link = out / f".{LATEST}.{os.getpid()}.tmp"
    try:
        os.symlink(newest[1], link)
        os.replace(link, out / LATEST)
    except OSError:  # no symbolic links here, or no room: the runs themselves are complete
        with contextlib.suppress(OSError):
            os.unlink(link)


@dataclass
class Run:
    """One run's folder: where its results go, and what it records about itself."""

    folder: Path
    """The run's folder, with the .incomplete suffix until it finishes."""
    manifest: dict
    saved: set[str] = field(default_factory=set)
    """Names of the submissions whose result is on disk."""
    _lock: int | None = None

    @property
    def out(self) -> Path:
        return self.folder.parent

    @property
    def seed(self) -> int:
        return self.manifest["seed"]

    @property
    def finished(self) -> bool:
        return not self.folder.name.endswith(INCOMPLETE)

    # --- starting, resuming and finishing -------------------------------------------------------

    @classmethod
    def start(cls, out: Path, source: Path, seed: int, options: dict) -> "Run":
        """A new run folder in `out` (created if missing; see `own_folder`), locked and marked as running."""
        own_folder(out, "results folder")
        point_latest(out)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        # Made whole under a hidden name, then renamed: a run folder never lacks its manifest.
        making = Path(tempfile.mkdtemp(prefix=f".run-{stamp}-", suffix=".tmp", dir=out))
        run = cls(making, {"status": "running", "seed": seed, "source": str(source.resolve()), "options": options,
                           "started": time.time(), "pid": os.getpid()})
        try:
            making.chmod(0o755)
            run._take_lock()
            run._write_manifest()
            for number in range(1, 1000):
                name = f"run-{stamp}-seed{seed}" + (f"-{number}" if number > 1 else "")
                if (out / name).exists() or (out / (name + INCOMPLETE)).exists():
                    continue
                try:
                    os.rename(making, out / (name + INCOMPLETE))
                except OSError:
                    if (out / (name + INCOMPLETE)).exists():
                        continue  # another run took the name in between
                    raise
                run.folder = out / (name + INCOMPLETE)
                return run
            raise FileExistsError(f"{out}: no free run folder name for {stamp}")
        except BaseException:
            run.close()
            shutil.rmtree(making, ignore_errors=True)
            raise

    @classmethod
    def resume(cls, out: Path, source: Path) -> "Run":
        """The newest run of `source` in `out`, locked, with the results it kept, if that run is
        unfinished. An older unfinished run is history: a newer one, finished, took its place."""
        wanted = str(source.resolve())
        if out.is_dir():
            own_folder(out, "results folder")
            point_latest(out)
        runs = []
        for folder in sorted(out.glob("run-*")) if out.is_dir() else []:
            try:
                info = folder.lstat()
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    continue  # never a run this user did not make

                manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if _a_manifest(manifest) and manifest["source"] == wanted:
                runs.append((manifest["started"], str(folder), folder, manifest))
        if not runs:
            raise NothingToResume(f"{out}: no unfinished run of {source} to resume")
        _, _, folder, manifest = max(runs, key=lambda found: found[:2])
        if not folder.name.endswith(INCOMPLETE):
            raise NothingToResume(f"{out}: no unfinished run of {source} to resume (its latest, {folder.name}, "
                                  "is finished)")
        run = cls(folder, manifest)
        run._take_lock()
        for stale in folder.glob(".*.tmp"):  # a killed run's half-written file
            stale.unlink()
        manifest.update(status="running", pid=os.getpid(), resumed=time.time())
        run._write_manifest()
        return run

    def note_files(self, found: list[tuple[Path, str]]) -> None:
        """Record which file each submission's name stands for now (its device and inode), as the
        run is started or resumed (after `kept`, which keeps a result only for the file noted when it
        was graded): a folder renamed keeps its files' change times, so two students' folders
        swapped between two sessions would otherwise keep each other's grades."""
        files = self.manifest.get("files")
        noted = dict(files) if isinstance(files, dict) else {}
        for path, name in found:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            noted[name] = [info.st_dev, info.st_ino]
        if noted != files:
            self.manifest["files"] = noted
            self._write_manifest()

    def kept(self, found: list[tuple[Path, str]]) -> dict[str, dict]:
        """name -> stored result document, for each submission in `found` whose result this run
        already saved, whose file is the one the run noted for that name (`note_files`), and whose
        file has not changed since the run started."""
        started = self.manifest["started"]
        files = self.manifest.get("files")
        documents = {}
        for path, name in found:
            target = self.folder / result_file(name)
            try:
                info = os.lstat(path)
                if info.st_ctime > started:
                    continue  # changed (or replaced) after the run began: grade it again
                if not isinstance(files, dict) or files.get(name) != [info.st_dev, info.st_ino]:
                    continue  # another file under that name (folders swapped): grade it again
                document = json.loads(target.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(document, dict) and document.get("submission") == name \
                    and document.get("seed") == self.seed:
                documents[name] = document
                self.saved.add(name)
        return documents

    def save(self, name: str, document: str) -> None:
        write_atomically(self.folder / result_file(name), document)
        self.saved.add(name)

    def mark(self, status: str) -> None:
        """Record why the run stopped (best effort: the disk may be the reason)."""
        self.manifest["status"] = status
        try:
            self._write_manifest()
        except OSError:
            pass

    def finish(self, summary: str | Iterable[str], skipped: list[tuple[str, str]]) -> None:
        """Write the summary (its text, or its lines as they come), then give the folder its final
        name and point `latest` at it. A result saved before an interruption for a submission no
        longer there is removed: a finished run holds exactly the results its summary lists."""
        kept = {result_file(name) for name in self.saved} | {MANIFEST, SUMMARY}
        for path in self.folder.iterdir():
            if path.name.endswith(".json") and path.name not in kept:
                path.unlink()
        write_atomically(self.folder / SUMMARY, summary)
        self.manifest.update(status="finished", finished=time.time(),
                             submissions={name: result_file(name) for name in sorted(self.saved)},
                             skipped=[{"submission": name, "reason": reason} for name, reason in skipped])
        self._write_manifest()
        final = self.folder.with_name(self.folder.name[:-len(INCOMPLETE)])
        with _latest_lock(self.out):  # no other run switches `latest` between the rename and the switch
            for number in range(1, 1000):
                target = final if number == 1 else final.with_name(f"{final.name}-{number}")
                if target.exists():
                    continue
                try:
                    os.rename(self.folder, target)
                except OSError as error:
                    if target.exists():
                        continue  # another run took the name in between
                    raise error
                break
            self.folder = target
            _point_latest(self.out)

    def discard(self) -> None:
        """Remove a run that saved nothing, and its folder with it."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # --- inside ---------------------------------------------------------------------------------

    def _take_lock(self) -> None:
        descriptor = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise RunBusy(f"{self.folder}: another qkv-grade is still writing this run") from None
        self._lock = descriptor

    def _write_manifest(self) -> None:
        write_atomically(self.folder / MANIFEST, json.dumps(self.manifest, indent=1) + "\n")
