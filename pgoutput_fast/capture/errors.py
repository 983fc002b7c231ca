"""The failures of capture and of the segment readers, each with its exit status.

Every one is a ``pgoutput_fast.errors.UserError``: the command line prints it as one
line (what failed, where, what to do), with a traceback only under ``--debug``. The
exit status tells a supervisor (systemd, Kubernetes) whether a restart can help:

====  ==========================  ==================================================
code  class                       restart helps?
====  ==========================  ==================================================
0     (clean stop)                SIGINT/SIGTERM, ``--until-lsn`` reached
1     (unexpected)                a bug: the traceback is printed
2     ``CaptureError``            no: a bad option or server setting
3     ``ConnectError``            no: the server refuses the connection (wrong
                                  password, unknown role or database, nothing
                                  listening at the first attempt)
4     ``ServerRefused``           no: the slot or publication is missing or wrong, the
                                  slot is held by another process
5     ``DirectoryRefused``        no: ``--out`` is locked by another capture, or its
                                  checkpoint is missing, damaged, older than the slot
                                  or of another server/slot
6     ``DurabilityError``         after the cause is fixed: a write, fsync or rename
                                  failed (full disk, read-only file system); nothing
                                  past the last checkpoint was confirmed
7     ``SegmentError``            no: a segment or the manifest is missing or damaged
====  ==========================  ==================================================
"""

from __future__ import annotations

from ..errors import UserError

__all__ = ["CaptureError", "ConnectError", "ServerRefused", "DirectoryRefused",
           "DurabilityError", "SegmentError"]


class CaptureError(UserError, RuntimeError):
    """A problem the user has to fix (bad options, missing slot, wrong server)."""

    exit_code = 2


class ConnectError(CaptureError):
    """The server refuses the connection for a reason a retry cannot fix."""

    exit_code = 3


class ServerRefused(CaptureError):
    """The server refuses the replication itself (slot, publication, database)."""

    exit_code = 4


class DirectoryRefused(CaptureError):
    """The capture directory cannot be used as it is; nothing in it was changed."""

    exit_code = 5


class DurabilityError(CaptureError):
    """Writing to the capture directory failed; confirmation stopped at the last
    checkpoint."""

    exit_code = 6


class SegmentError(UserError, ValueError):
    """A capture directory that does not prove its integrity: a segment or the
    manifest missing, truncated, reordered or altered, or the checkpoint damaged."""

    exit_code = 7
