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

import os
import shutil
import stat

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns


class LinkSafeCollect(ExchangeCollect):
    """nbgrader's ExchangeCollect, whose copy keeps links as links and changes no file they name."""

    def do_copy(self, src, dest, log=None):
        size = self.get_size(src)  # nbgrader's own count, which skips links
        if size > 1000 * self.coursedir.max_dir_size:
            self.log.error("Directory size is too big")
            raise RuntimeError(f"Directory size is too big. Size is {size}, maximum size is "
                               f"{1000 * self.coursedir.max_dir_size}")
        shutil.copytree(src, dest, symlinks=True,
                        ignore=ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                               max_file_size=self.coursedir.max_file_size, log=self.log))
        if self.coursedir.groupshared:  # as nbgrader does, for the folders and files copied, never a link's target
            for folder, _, files in os.walk(dest):
                for path, wanted, mask in [(folder, 0o2770, 0o2777)] + [
                        (os.path.join(folder, name), 0o660, 0o777) for name in files]:
                    mode = os.lstat(path).st_mode
                    if stat.S_ISLNK(mode) or mode & wanted == wanted:
                        continue
                    try:
                        os.chmod(path, (mode | wanted) & mask)
                    except PermissionError:
                        self.log.warning("Could not update permissions of %s to make it groupshared", path)
