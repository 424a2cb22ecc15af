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
      copied from there: an entry swapped between the test and the copy is not what is copied;
    - named pipes, sockets and devices are not copied; every folder and file copied is left
      readable and writable by the instructor (a folder handed in as mode 055 could not be removed
      by the next `collect --update`);
    - each submission is copied beside the student's `submitted/` folder first, which it replaces
      only once whole: one that cannot be copied (too large, say) leaves the earlier one as it was,
      with an error naming it, and the next student is collected as ever.

    Names are shown escaped in every line this writes: a folder's name is the student's text."""

    def _path_to_record(self, path):
        try:
            return super()._path_to_record(path)
        except Exception as error:  # no time in the name, or no name at all: that entry alone
            filename = os.path.basename(path)
            self.log.error("%r: not a submission's name (%s): not collected", filename, _plain(error))
            return {"username": "\0" + filename, "filename": filename, "timestamp": datetime.datetime.min,
                    "refused": "not a submission's name"}

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
        try:
            owner = pwd.getpwuid(status.st_uid).pw_name
        except KeyError:
            owner = f"user id {status.st_uid}"
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
                    self.log.error("%r: not collected: %s", record["filename"], why)
        return super()._sort_by_timestamp(kept or records)  # none of theirs: copy_files takes none

    def copy_files(self):
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
            opened = f"/proc/self/fd/{descriptor}"
            self.do_copy(opened if os.path.isdir(opened) else source, staging)
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
        size = self.get_size(src)  # nbgrader's own count, which skips links
        if size > 1000 * self.coursedir.max_dir_size:
            raise RuntimeError(f"its folder is too large: {size} bytes, where at most "
                               f"{1000 * self.coursedir.max_dir_size} are collected")
        patterns = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                   max_file_size=self.coursedir.max_file_size, log=self.log)

        def ignored(folder, names):  # nbgrader's patterns, and whatever is no folder, file or link
            skipped = set(patterns(folder, names))
            for name in names:
                try:
                    mode = os.lstat(os.path.join(folder, name)).st_mode
                except OSError:
                    skipped.add(name)
                    continue
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                    skipped.add(name)
            return skipped

        shutil.copytree(src, dest, symlinks=True, ignore=ignored)
        # every folder and file copied: the instructor's to read, change and remove (never a link's
        # target), and the course group's too where the course is shared, as nbgrader does
        shared = self.coursedir.groupshared
        _open_up(dest, (0o2770, 0o2777) if shared else (0o700, 0o7777), (0o660, 0o777) if shared else (0o600, 0o7777),
                 lambda path: self.log.warning("Could not update permissions of %r", path))


def _plain(error: BaseException) -> str:
    """An error in one line, without what a terminal would act on."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)[:300]


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
