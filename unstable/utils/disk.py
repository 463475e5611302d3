"""Writing into a run directory: a place the run cannot write is one clear error, not a traceback.

The learner's checkpoints, the Tracker's metrics, transcripts and failed-games log, and the run
state all live in the run directory. When the filesystem refuses a write there (permission denied,
a read-only mount, an immutable directory, a full disk or quota) nothing the run does next can
succeed, and each actor that tries would stop with its own ``PermissionError`` traceback. Such a
write is done inside :func:`writing`, which turns the ``OSError`` into :class:`RunDirUnwritableError`:
it names the path, the reason and what to do. Other ``OSError`` s (a missing file, a bug) pass through.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

# the errors that say "this location cannot be written now", not "this call is wrong"
UNWRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


class RunDirUnwritableError(OSError):
    """The run could not write ``path``; ``os_error`` is the ``OSError`` that said why.

    ``run_dir`` (when known) goes into the message's resume command.
    """

    def __init__(self, path: str | os.PathLike, os_error: OSError, run_dir: str | os.PathLike | None = None):
        self.path, self.os_error = str(path), os_error
        self.run_dir = str(run_dir) if run_dir is not None else None
        reason = os_error.strerror or str(os_error)
        resume = f"unstable train --resume {self.run_dir}" if self.run_dir else "unstable train --resume RUN_DIR"
        super().__init__(f"could not write {self.path}: {reason}; free space or fix permissions there, then "
                         f"continue the run with `{resume}` (the checkpoints written so far are intact)")
        self.errno = os_error.errno

    def __reduce__(self) -> tuple:  # pickled across Ray: rebuilt from its parts (the default passes the message)
        return type(self), (self.path, self.os_error, self.run_dir)

    def for_run(self, run_dir: str | os.PathLike) -> RunDirUnwritableError:
        """A fresh copy (not Ray's wrapper of it) whose message names ``run_dir`` to resume unless it
        names one already (the learner knows only its checkpoints folder; the run handle knows the run)."""
        error = RunDirUnwritableError(self.path, self.os_error, self.run_dir or run_dir)
        error.__cause__ = self.os_error
        return error


def is_unwritable(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` saying the location cannot be written (see the module docstring)."""
    return isinstance(exc, OSError) and exc.errno in UNWRITABLE_ERRNOS


@contextmanager
def writing(path: str | os.PathLike, run_dir: str | os.PathLike | None = None) -> Iterator[None]:
    """Run the block's writes to ``path``; a refused write raises :class:`RunDirUnwritableError`."""
    try:
        yield
    except RunDirUnwritableError:
        raise
    except OSError as exc:
        if not is_unwritable(exc):
            raise
        raise RunDirUnwritableError(path, exc, run_dir) from exc
