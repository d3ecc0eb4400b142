"""nbgrader's exchange on a class server: a student's submission and feedback for them alone.

nbgrader's default exchange (0.9) keeps students apart by names nobody can list: the
inbound folder is ``-wx`` for students, each submission folder carries a random suffix,
and a feedback file is named by a hash of the submission's secret. Yet a submission
folder is left ``rwxrwxrwx`` with its files ``rw-r--r--`` (nbgrader issue 978), and the
released feedback keeps the mode of the instructor's file: whoever learns a name reads
or rewrites what is behind it. ``make classroom`` (``scripts/classroom.sh``) names these
two plugins in the class's ``nbgrader_config.py`` (``ExchangeFactory``), so that
permissions, not names, keep students apart:

- :class:`PrivateSubmit`: a submission is ``rwxrws---`` (folders) and ``rw-r-----``
  (files), owned by the student, its group the instructors' (the inbound folder is
  set-group-ID, root-owned, ``rwxrws-wx`` with the sticky bit): the instructor collects
  it, no other student opens it.
- :class:`PrivateReleaseFeedback`: each released feedback file is ``rw-------`` plus a
  POSIX ACL entry that lets its student (nbgrader's student id is the student's Unix
  login on a class server) read it. Where the file system keeps no ACLs, the file keeps
  nbgrader's mode and a warning says so.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import stat
import struct

from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import notebook_hash

SUBMISSION_DIR = 0o2770  # the owner and the instructors' group (set-group-ID keeps it)
SUBMISSION_FILE = 0o640


def make_private(top: str, dir_mode: int = SUBMISSION_DIR,
                 file_mode: int = SUBMISSION_FILE) -> None:
    """Every folder under `top` (itself included) `dir_mode`, every file `file_mode`."""
    for dirname, _, filenames in os.walk(top):
        for name in filenames:
            os.chmod(os.path.join(dirname, name), file_mode)
        os.chmod(dirname, dir_mode)


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, leaving the submission to its student and the instructors."""

    def copy_files(self):
        super().copy_files()
        make_private(os.path.join(self.inbound_path, self.assignment_filename))


# POSIX ACLs as the kernel reads them from the system.posix_acl_access attribute
# (linux/posix_acl_xattr.h): a version, then (tag, permissions, id) entries, in tag order.
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF


def readable_by(path: str, uid: int) -> None:
    """`path`: read and write for its owner, read for `uid`, nothing for anyone else."""
    entries = [(_USER_OBJ, 6, _UNDEFINED_ID), (_USER, 4, uid), (_GROUP_OBJ, 0, _UNDEFINED_ID),
               (_MASK, 4, _UNDEFINED_ID), (_OTHER, 0, _UNDEFINED_ID)]
    blob = struct.pack("<I", _ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    os.setxattr(path, "system.posix_acl_access", blob)


class PrivateReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, each file readable by its own student alone."""

    def copy_files(self):
        super().copy_files()
        # the files nbgrader has just released, found as nbgrader names them
        pattern = re.escape(os.path.sep).join([
            self.coursedir.format_path(self.coursedir.feedback_directory, "(?P<student_id>.*)",
                                       self.coursedir.assignment_id, escape=True),
            "(?P<notebook_id>.*).html"])
        for html in glob.glob(os.path.join(self.src_path, "*.html")):
            m = re.match(pattern, html)
            secret_file = os.path.join(os.path.dirname(html), "submission_secret.txt")
            if m is None or not os.path.exists(secret_file):
                continue
            with open(secret_file) as fh:
                checksum = notebook_hash(secret=fh.read(), notebook_id=m["notebook_id"])
            released = os.path.join(self.dest_path, f"{checksum}.html")
            if not os.path.exists(released):
                continue
            try:
                readable_by(released, pwd.getpwnam(m["student_id"]).pw_uid)
            except KeyError:
                self.log.warning("No account %r: feedback %s keeps nbgrader's permissions",
                                 m["student_id"], released)
            except OSError as exc:
                os.chmod(released, 0o644)
                self.log.warning("No ACL on %s (%s): it keeps nbgrader's permissions, "
                                 "protected by its name alone", released, exc)
