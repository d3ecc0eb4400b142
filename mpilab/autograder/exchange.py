"""nbgrader's exchange on a class server: a student's submission and feedback for them alone.

nbgrader's default exchange (0.9) keeps students apart by names nobody can list: the
inbound folder is ``-wx`` for students, each submission folder carries a random suffix,
and a feedback file is named by a hash of the submission's secret. Yet a submission
folder is left ``rwxrwxrwx`` with its files ``rw-r--r--`` (nbgrader issue 978), and the
released feedback keeps the mode of the instructor's file: whoever learns a name reads
or rewrites what is behind it. ``make classroom`` (``scripts/classroom.sh``) names these
two plugins in the class's ``nbgrader_config.py`` (``ExchangeFactory``), so that
permissions, not names, keep students apart:

- :class:`PrivateSubmit`: a submission (folders, files) is its student's and the
  instructors' group's alone (a POSIX ACL: owner, the inbound folder's group, no one
  else); the inbound folder itself is root's, ``rwxrws-wx`` with the sticky bit, so no
  student lists it or renames another's submission.
- :class:`PrivateReleaseFeedback`: each released feedback file is ``rw-------`` plus an
  ACL entry that lets its student (nbgrader's student id is the student's Unix login on
  a class server) read it.

Where the file system keeps no ACLs, both keep nbgrader's permissions and a warning says
so.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import struct

from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import notebook_hash

# POSIX ACLs as the kernel reads them from the system.posix_acl_access attribute
# (linux/posix_acl_xattr.h): a version, then (tag, permissions, id) entries, in tag order.
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF


def set_acl(path: str, owner: int, *, users: dict[int, int] | None = None,
            groups: dict[int, int] | None = None) -> None:
    """`path`: `owner` (rwx bits, 0-7) for its owner, the given bits for the `users` and
    `groups` (id: bits) named, nothing for its group and everyone else. The owner of a
    file may set this on it without belonging to the groups it names.

    Parameters
    ----------
    path : str
        The file or folder.
    owner : int
        The owner's permission bits (0-7).
    users, groups : dict of int to int, optional
        Bits for each user id and group id named (none by default).

    Raises
    ------
    OSError
        The file system keeps no ACLs, or the caller may not set them.
    """
    users, groups = users or {}, groups or {}
    mask = 0
    for bits in (*users.values(), *groups.values()):
        mask |= bits
    entries = [(_USER_OBJ, owner, _UNDEFINED_ID),
               *[(_USER, bits, uid) for uid, bits in sorted(users.items())],
               (_GROUP_OBJ, 0, _UNDEFINED_ID),
               *[(_GROUP, bits, gid) for gid, bits in sorted(groups.items())],
               (_MASK, mask, _UNDEFINED_ID), (_OTHER, 0, _UNDEFINED_ID)]
    blob = struct.pack("<I", _ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, bits, ident) for tag, bits, ident in entries)
    os.setxattr(path, "system.posix_acl_access", blob)


def make_private(top: str, gid: int) -> None:
    """Every folder under `top` (itself included) and every file: its owner's and the
    group `gid`'s (read; folders: rwx, so that the group may remove them), no one else's.

    Parameters
    ----------
    top : str
        The folder (a submission in the exchange's inbound folder).
    gid : int
        The group that may read it (the instructors').
    """
    for dirname, _, filenames in os.walk(top):
        for name in filenames:
            set_acl(os.path.join(dirname, name), 6, groups={gid: 4})
        set_acl(dirname, 7, groups={gid: 7})


def readable_by(path: str, uid: int) -> None:
    """`path`: read and write for its owner, read for `uid`, nothing for anyone else.

    Parameters
    ----------
    path : str
        The file.
    uid : int
        The one other user who may read it (the student a feedback file is for).
    """
    set_acl(path, 6, users={uid: 4})


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, leaving the submission to its student and the instructors (the
    inbound folder's group). By ACL, not by the folder's group: a student's copy takes the
    mode of their own folder, and the kernel drops the set-group-ID bit that would have
    given the files written after it (timestamp, secret) the instructors' group."""

    def copy_files(self):
        """nbgrader's copy into the inbound folder, then the copy made private."""
        super().copy_files()
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        try:
            make_private(dest, os.stat(self.inbound_path).st_gid)
        except OSError as exc:
            self.log.warning("No ACL on %s (%s): it keeps nbgrader's permissions, "
                             "protected by its name alone", dest, exc)


class PrivateReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, each file readable by its own student alone."""

    def copy_files(self):
        """nbgrader's release, then each released file made readable by its student."""
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
                self.log.warning("No ACL on %s (%s): it keeps nbgrader's permissions, "
                                 "protected by its name alone", released, exc)
