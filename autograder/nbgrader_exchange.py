"""nbgrader's collect, copying what a student hands in without following their links.

`nbgrader collect` copies each submission from the exchange's inbound folder with
`shutil.copytree`, which follows every symbolic link, with the instructor's rights. A student who
puts in their submission a link to the course's source notebook (solutions and hidden tests), to a
classmate's submitted notebook or to the course's grading key gets that file's copy in their
`submitted/` folder. This collect copies a link as a link: `qkv-grade --nbgrader` reads no linked
file, so such a notebook is that student's submission, unreadable, and costs no one else.

qkv-course's nbgrader_config.py selects it (`c.ExchangeFactory.collect`); everything else is
nbgrader's own collect.
"""
from __future__ import annotations

import datetime
import itertools
import os
import shutil
import stat
import sys

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns

if sys.platform != "win32":
    import pwd
else:  # as nbgrader's collect: no accounts to match names with
    pwd = None


class LinkSafeCollect(ExchangeCollect):
    """nbgrader's ExchangeCollect, whose copy keeps links as links and changes no file they name,
    which collects no submission in a folder a classmate made, and for which one student's
    submission, whatever it holds, never stops the collection of the others'.

    Anyone may make entries in the inbound folder, named `<student>+<assignment>+<time>+<random>`,
    and nbgrader takes each student's latest: a classmate's folder named for a later time, made
    with their own account, was collected as that student's (nbgrader only warns); a link named
    for oneself and pointing at a classmate's submitted folder was followed and copied; a name
    without a time, a named pipe or a file too large stopped the collection of every student after.
    Here:

    - an entry that is not a folder, or that was made by an account other than the student it
      names (or the instructor collecting, or root), is left where it is, with an error naming it,
      and that student's own latest folder is collected instead (on or before the due date with
      `--before-duedate`); `CollectApp.check_owner = False` turns the owner test off, as it turns
      off nbgrader's warning: where every student's files belong to one account, no owner tells them
      apart;
    - the folder is opened once, without following a link, its owner read from what was opened, and
      copied from there, each file and folder in it opened from the descriptor of the folder that
      holds it, never through a link: an entry swapped for a link between the listing and the copy
      (to a classmate's submitted notebook, say) is left out, not followed;
    - named pipes, sockets and devices are not copied; every folder and file copied is left
      readable and writable by the instructor (a folder handed in as mode 055 could not be removed
      by the next `collect --update`);
    - the time a submission's name gives (and its timestamp.txt) is the student's to write: where it
      is more than CLOCK_SLACK from when the folder's files last changed (their ctime, which the
      kernel keeps), the submission is taken as made then, for which is the latest, for
      `--before-duedate` and in the timestamp.txt collected, with an error naming it;
    - each submission is copied beside the student's `submitted/` folder first, which it replaces
      only once whole: one that cannot be copied (too large, say) leaves the earlier one as it was,
      with an error naming it, and the next student is collected as ever.

    Names are shown escaped in every line this writes: a folder's name is the student's text. An
    entry not collected is told in a line naming the account that made it; past MOST_TOLD such
    lines for one account, the rest are counted and told in one line: a classmate's hundred
    thousand entries make a dozen lines, not a hundred thousand that bury the others."""

    def init_src(self):
        if self.coursedir.course_id:
            why = exchange_problem(os.path.join(self.root, self.coursedir.course_id, "inbound"))
            if why is not None:
                self.fail(f"The course's exchange folder cannot be trusted: {_escaped(why)}. Nothing was collected.")
        super().init_src()

    def _path_to_record(self, path):
        try:
            record = super()._path_to_record(path)
        except Exception as error:  # no time in the name, or no name at all: that entry alone
            filename, maker = os.path.basename(path), _maker(path)
            self._tell(maker, "%r: not a submission's name (%s), made by %r: not collected", filename,
                       _plain(error), maker)
            return {"username": "\0" + filename, "filename": filename, "timestamp": datetime.datetime.min,
                    "refused": "not a submission's name"}
        changed = _last_changed(path)
        if changed is not None and abs(record["timestamp"] - changed) > CLOCK_SLACK:
            # the time is the student's own text: the folder's name (and timestamp.txt), which
            # anyone can write; when its files last changed is the kernel's (their ctime)
            maker = _maker(path)
            self._tell(maker, "%r, made by %r: its name says it was submitted at %s, but its files last "
                       "changed at %s: collected as submitted then", record["filename"], maker,
                       record["timestamp"], changed)
            record.update(claimed=record["timestamp"], timestamp=changed)
        return record

    def _refused(self, record, status=None) -> str | None:
        """Why a submission's entry is not collected (it is no folder, or another account made it),
        or None; `status`: what was opened, else the entry is looked at without following it."""
        if record.get("refused"):
            return record["refused"]
        if status is None:
            try:
                status = os.lstat(os.path.join(self.inbound_path, record["filename"]))
            except OSError as error:
                return f"it cannot be read ({_plain(error)})"
        if not stat.S_ISDIR(status.st_mode):
            return "it is not a folder (a link, say)"
        if not self.check_owner or pwd is None or status.st_uid in (0, os.geteuid()):
            return None
        owner = _account(status.st_uid)
        if owner == record["username"]:
            return None
        return f"it claims to be submitted by {record['username']!r} but was made by {owner!r}"

    def _sort_by_timestamp(self, records):
        # a student's own folders alone, each by time, wherever there is one: the latest of them is
        # taken (or the latest on or before the due date), never another's in their name
        told = self.__dict__.setdefault("_told", set())
        kept = []
        for record in records:
            why = self._refused(record)
            if why is None:
                kept.append(record)
            elif record["filename"] not in told:
                told.add(record["filename"])
                if not record.get("refused"):  # (a name without a time was told as it was read)
                    maker = _maker(os.path.join(self.inbound_path, record["filename"]))
                    self._tell(maker, "%r: not collected: %s", record["filename"],
                               why if "made by" in why else f"{why}, made by {maker!r}")
        return super()._sort_by_timestamp(kept or records)  # none of theirs: copy_files takes none

    def _tell(self, account: str, message: str, name: str, *args) -> None:
        """An error about the entry `name`, which `account` made: told in full for the first
        MOST_TOLD entries of that account, counted for the others."""
        entries = self.__dict__.setdefault("_told_by", {}).setdefault(account, {})
        if entries.setdefault(name, len(entries)) < MOST_TOLD:
            self.log.error(message, name, *args)

    def copy_files(self):
        for account, entries in sorted(self.__dict__.get("_told_by", {}).items()):
            if len(entries) > MOST_TOLD:
                self.log.error("%d more entries made by %r were not collected as they are, or not at all "
                               "(not told one by one)", len(entries) - MOST_TOLD, account)
        records = [record for record in self.src_records if self._refused(record) is None]
        if not records:
            self.log.warning("No submissions of %r for course %r to collect", self.coursedir.assignment_id,
                             self.coursedir.course_id)
        else:
            self.log.info("Processing %d submissions of %r for course %r", len(records),
                          self.coursedir.assignment_id, self.coursedir.course_id)
        for record in records:
            try:
                self._collect(record)
            except Exception as error:  # that student's submission alone: never the rest of the class
                self.log.error("%r: not collected: %s", record["filename"], _plain(error))

    def _collect(self, record):
        student, assignment = record["username"], self.coursedir.assignment_id
        source = os.path.join(self.inbound_path, record["filename"])
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, assignment)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        updating = os.path.isdir(dest)
        if updating:  # as nbgrader decides: a newer submission, or with --before-duedate another one
            existing = self.coursedir.get_existing_timestamp(dest)
            if not ((self.update and (existing is None or record["timestamp"] > existing))
                    or (self.before_duedate and existing != record["timestamp"])):
                self.log.info("%s: %r %r", "No newer submission to collect" if self.update else
                              "Submission already exists, use --update to update", student, assignment)
                return
        self.log.info("%s submission: %r %r", "Updating" if updating else "Collecting", student, assignment)
        staging = os.path.join(os.path.dirname(dest), "." + os.path.basename(dest) + ".collecting")
        if os.path.lexists(staging):
            _remove(staging)
        descriptor = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            why = self._refused(record, os.fstat(descriptor))
            if why is not None:  # swapped since it was listed
                raise RuntimeError(why)
            copied = self._copy_opened(descriptor, staging)
            changed = _utc(max(copied, os.fstat(descriptor).st_ctime))
            if changed - record["timestamp"] > CLOCK_SLACK:  # what was copied changed later still
                if record.get("claimed") is None:
                    self.log.error("%r: its name says it was submitted at %s, but what was copied of it last "
                                   "changed at %s: collected as submitted then", record["filename"],
                                   record["timestamp"], changed)
                    record["claimed"] = record["timestamp"]
                record["timestamp"] = changed
            # timestamp.txt is the collect's own, never the student's text: the time it took the
            # submission as made (the name's, where it holds; else when the files last changed),
            # written as `nbgrader submit` writes one. The name's text itself is the student's: one
            # that nbgrader's parser reads and qkv-grade's does not ("... UTC."), copied here, left
            # the gradebook with no time, and the submission was never late.
            _write_timestamp(staging, record["timestamp"].strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
        except BaseException:
            if os.path.lexists(staging):
                _remove(staging)
            raise
        finally:
            os.close(descriptor)
        if updating:
            _remove(dest)
        os.rename(staging, dest)

    def do_copy(self, src, dest, log=None):
        descriptor = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            self._copy_opened(descriptor, dest)
        finally:
            os.close(descriptor)

    def _copy_opened(self, folder: int, dest: str) -> float:
        """Copy the opened folder `folder` to `dest`, every entry in it reached from the descriptor
        of the folder holding it and opened without following a link: a file or folder the student
        swaps for a link (to a classmate's submitted notebook, say) while it is copied is refused
        by the open, never followed. At most nbgrader's `max_dir_size` is copied, counted as it is
        read. Returns the newest ctime of what was copied."""
        patterns = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                   max_file_size=self.coursedir.max_file_size, log=_Escaping(self.log))
        budget = _Budget(1000 * self.coursedir.max_dir_size)
        _copy_folder(folder, dest, patterns, budget, lambda name, error: self.log.warning(
            "%r: not copied (%s)", name, _plain(error)))
        # every folder and file copied: the instructor's to read, change and remove (never a link's
        # target), and the course group's too where the course is shared, as nbgrader does
        shared = self.coursedir.groupshared
        _open_up(dest, (0o2770, 0o2777) if shared else (0o700, 0o7777), (0o660, 0o777) if shared else (0o600, 0o7777),
                 lambda path: self.log.warning("Could not update permissions of %r", path))
        return budget.newest


MOST_TOLD = 10
"""Entries of the inbound folder told one by one, per account that made them (see LinkSafeCollect)."""


def _account(uid: int) -> str:
    """The name of the account `uid`, or 'user id N' where it has none."""
    try:
        return pwd.getpwuid(uid).pw_name if pwd is not None else f"user id {uid}"
    except KeyError:
        return f"user id {uid}"


def _maker(path: str) -> str:
    """The account that made the entry `path` (its owner, the entry itself, never a link's target)."""
    try:
        return _account(os.lstat(path).st_uid)
    except OSError:
        return "an account unknown (the entry is gone)"


# How far the time a submission's name gives may be from when its files last changed. `nbgrader
# submit` names the folder for the moment it starts, then copies the files and writes timestamp.txt:
# a second or so apart on one machine, more where the exchange is a network file system whose
# server's clock runs apart from the submitting machine's.
CLOCK_SLACK = datetime.timedelta(minutes=2)


def exchange_problem(inbound: str) -> str | None:
    """Why the course's inbound folder may not be the instructor's, or None. Whoever may rename the
    course's folder, or a folder above it, may put one of their own in its place (nbgrader makes the
    exchange's root writable by everyone, without the sticky bit), and receive the classmates'
    submissions there, or hide them: the inbound folder and the course's folder must be real
    folders of this user or root, and every folder above them renamable by no one else (as
    `store.changeable_above` asks; `chmod +t` on the exchange's root gives that)."""
    from pathlib import Path

    from .store import changeable_above

    for folder in (inbound, os.path.dirname(inbound)):
        try:
            status = os.lstat(folder)
        except OSError as error:
            return f"{folder} cannot be looked at ({_plain(error)})"
        if not stat.S_ISDIR(status.st_mode):
            return f"{folder} is not a folder (a link, say)"
        if status.st_uid not in (0, os.geteuid()):
            return f"{folder} belongs to another user (uid {status.st_uid})"
    why = changeable_above(Path(os.path.dirname(inbound)))
    if why is not None:
        return why + ": someone else could put a course folder of their own in its place (`chmod +t` on the exchange's root stops that)"
    return None


def _last_changed(path: str) -> datetime.datetime | None:
    """When anything in the folder at `path` last changed (the newest ctime of the folder and of
    what it holds, links not followed), looked at as far as the copy would copy it (MOST_ENTRIES,
    MOST_DEPTH: a folder holding more is not collected at all), as nbgrader's naive UTC times are;
    None where the folder cannot be read. The copy looks again at what it copies (`_Budget.newest`)."""
    newest, todo, looked = None, [(path, 0)], 0
    while todo and looked <= MOST_ENTRIES:
        folder, depth = todo.pop()
        try:
            status = os.lstat(folder)
            if not stat.S_ISDIR(status.st_mode):
                return None  # (a link, say, which the collect refuses anyway: never followed)
            newest = max(newest or 0, status.st_ctime)
            with os.scandir(folder) as listing:
                for entry in itertools.islice(listing, MOST_ENTRIES + 1 - looked):
                    looked += 1
                    newest = max(newest, entry.stat(follow_symlinks=False).st_ctime)
                    if entry.is_dir(follow_symlinks=False) and depth < MOST_DEPTH:
                        todo.append((entry.path, depth + 1))
        except OSError:
            if folder == path:
                return None
    return _utc(newest)


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None)


def _write_timestamp(folder: str, when: str) -> None:
    path = os.path.join(folder, "timestamp.txt")
    if os.path.lexists(path):
        _remove(path)  # (a folder of that name, say)
    with open(path, "x", encoding="utf-8") as file:
        file.write(when)


class TooLarge(RuntimeError):
    pass


MOST_ENTRIES = 50_000
"""Files, folders and links of one submission that are collected, counted as they are copied (as
qkv-grade looks at no more of a student's folder): empty files cost no bytes, and three hundred
thousand of them took a minute of every collect and as many of the course's inodes."""
MOST_DEPTH = 32
"""Folders below a submission's own that are copied (qkv-grade looks no deeper either)."""


class _Budget:
    """What one submission's copy may still take: bytes (nbgrader's max_dir_size) and entries."""

    def __init__(self, size: int):
        self.bytes, self.entries = size, MOST_ENTRIES
        self.newest = 0.0
        """The newest ctime of what was copied, as it was opened and once it was read."""

    def saw(self, status: os.stat_result) -> None:
        self.newest = max(self.newest, status.st_ctime)

    def take(self, size: int = 0) -> None:
        self.bytes -= size
        if self.bytes < 0:
            raise TooLarge("its folder is too large: more than nbgrader's max_dir_size is collected")

    def count(self) -> None:
        self.entries -= 1
        if self.entries < 0:
            raise TooLarge(f"its folder holds more than {MOST_ENTRIES} files and folders")


def _copy_folder(folder: int, dest: str, patterns, budget: _Budget, skipped, depth: int = 0) -> None:
    """The entries of the opened folder `folder` copied into a new folder `dest`: folders and regular
    files, each opened by name from `folder` with O_NOFOLLOW (and a file with O_NONBLOCK, its type
    checked on what was opened: a named pipe swapped in is never read), links kept as links, nbgrader's
    patterns applied; anything else, or an entry gone or swapped meanwhile, is left out
    (`skipped(name, error)`). A file keeps its mode but the set-id and sticky bits and the
    group's and others' write bits: the copy is the instructor's."""
    os.mkdir(dest, 0o700)
    names = []
    for name in os.listdir(folder):  # (the listing itself counts: a folder of a million names is refused)
        budget.count()
        names.append(name)
    names.sort()
    ignored = set(patterns(f"/proc/self/fd/{folder}", names))
    for name in names:
        if name in ignored:
            continue
        target = os.path.join(dest, name)
        try:
            status = os.stat(name, dir_fd=folder, follow_symlinks=False)
            budget.saw(status)
            if stat.S_ISLNK(status.st_mode):
                os.symlink(os.readlink(name, dir_fd=folder), target)
            elif stat.S_ISDIR(status.st_mode):
                if depth >= MOST_DEPTH:
                    raise TooLarge(f"its folders are nested more than {MOST_DEPTH} deep")
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
                try:
                    _copy_folder(inner, target, patterns, budget, skipped, depth + 1)
                    inner_status = os.fstat(inner)
                    budget.saw(inner_status)
                    _keep_times(inner_status, target)
                finally:
                    os.close(inner)
            elif stat.S_ISREG(status.st_mode):
                _copy_file(folder, name, target, budget)
        except TooLarge:
            raise
        except OSError as error:
            skipped(name, error)
    budget.saw(os.fstat(folder))  # an entry added, removed or renamed meanwhile changed its ctime


def _copy_file(folder: int, name: str, target: str, budget: _Budget) -> None:
    source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    try:
        status = os.fstat(source)
        budget.saw(status)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"no longer a file: a {'folder' if stat.S_ISDIR(status.st_mode) else 'special file'}")
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            while True:
                chunk = os.read(source, 1 << 20)
                if not chunk:
                    break
                budget.take(len(chunk))
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
        finally:
            os.close(out)
        budget.saw(os.fstat(source))  # dated by what was read: a write while it was read changed its ctime
        _keep_times(status, target)
    finally:
        os.close(source)


def _keep_times(status: os.stat_result, target: str) -> None:
    os.chmod(target, stat.S_IMODE(status.st_mode) & 0o755)
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


class _Escaping:
    """A log whose messages are escaped as `_plain` escapes them: nbgrader's patterns log the names
    of the files they leave out ("Ignoring file too large '…'"), which are the student's text."""

    def __init__(self, log):
        self.log = log

    def __getattr__(self, level: str):
        write = getattr(self.log, level)
        return lambda message, *args, **kwargs: write("%s", _escaped(str(message) % args if args else str(message)))


def _escaped(text: str) -> str:
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _plain(error: BaseException) -> str:
    """An error in one line, without what a terminal would act on."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return _escaped(text)[:300]


def _open_up(top: str, folders: tuple[int, int], files: tuple[int, int], failed=None) -> None:
    """Add the bits `folders[0]` to every folder under `top` (within the mask `folders[1]`) before
    looking into it, and `files[0]` to every file: never a link's target."""
    todo = [top]
    while todo:
        folder = todo.pop()
        entries = []
        try:
            mode = os.lstat(folder).st_mode
            if mode & folders[0] != folders[0]:
                os.chmod(folder, (mode | folders[0]) & folders[1])
        except OSError:
            if failed:
                failed(folder)
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if mode & files[0] != files[0]:
                        os.chmod(entry.path, (mode | files[0]) & files[1])
                except OSError:
                    if failed:
                        failed(entry.path)


def _remove(path: str) -> None:
    """A folder (or file) the collect made, removed; its folders opened up first where a student's
    modes shut them."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    _open_up(path, (0o700, 0o7777), (0o600, 0o7777))
    shutil.rmtree(path)
