"""Two notices every new user saw in ``unstable quickstart``'s output, silenced one by one.

* trueskill's ``__init__.py`` holds an invalid escape sequence (a backslash before a space) in a
  docstring: Python 3.12 warns about it (``SyntaxWarning``; ``DeprecationWarning`` before 3.12)
  whenever it compiles that file, which an install without bytecode does on first import.
  :func:`import_trueskill` imports trueskill with a filter for that warning, from trueskill's files, only.
* Ray enables token authentication for a new local cluster and logs ``Token authentication is
  enabled for this Ray cluster...`` at WARNING, ``Generated new authentication token ...`` and
  ``Started a local Ray instance.`` at INFO. :func:`quiet_ray_token_auth_notice` drops those records
  from their loggers only: other Ray warnings (and the one for a cluster where token authentication
  is *disabled*) and every error still show.
"""

from __future__ import annotations

import logging
import warnings
from types import ModuleType

#: The logger Ray's token-authentication notice comes from.
RAY_TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
RAY_TOKEN_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
#: What ``warnings`` calls a file's module when it warns while compiling it: its path without ``.py``.
_TRUESKILL_FILES = r".*[\\/]trueskill[\\/]"


def quiet_trueskill_escape_warning() -> None:
    """Ignore the invalid-escape-sequence warning of compiling trueskill's source (no other)."""
    for category in (SyntaxWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", message=r"invalid escape sequence", category=category,
                                module=_TRUESKILL_FILES)


def import_trueskill() -> ModuleType:
    """``import trueskill``, its compile-time escape-sequence warning silenced first."""
    quiet_trueskill_escape_warning()
    import trueskill

    return trueskill


#: The notices a new local Ray logs at every first run, by logger: dropped, and nothing else of those loggers.
RAY_START_NOTICES = {
    RAY_TOKEN_AUTH_LOGGER: (RAY_TOKEN_AUTH_NOTICE, "Generated new authentication token"),
    "ray._private.worker": ("Started a local Ray instance",),
}


class _DropNotices(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or not record.getMessage().startswith(self.prefixes)


_RAY_FILTERS = {name: _DropNotices(prefixes) for name, prefixes in RAY_START_NOTICES.items()}


def quiet_ray_token_auth_notice() -> None:
    """Drop Ray's start notices (:data:`RAY_START_NOTICES`: token authentication enabled, a new token saved,
    a local instance started; call before ``ray.init``; once is enough). Errors of those loggers still show."""
    for name, notice_filter in _RAY_FILTERS.items():
        logger = logging.getLogger(name)
        if notice_filter not in logger.filters:
            logger.addFilter(notice_filter)
