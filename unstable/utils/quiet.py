"""Two notices every new user saw in ``unstable quickstart``'s output, silenced one by one.

* trueskill's ``__init__.py`` holds an invalid escape sequence (a backslash before a space) in a
  docstring: Python 3.12 warns about it (``SyntaxWarning``; ``DeprecationWarning`` before 3.12)
  whenever it compiles that file, which an install without bytecode does on first import.
  :func:`import_trueskill` imports trueskill with a filter for that warning, from trueskill's files, only.
* Ray enables token authentication for a new local cluster and logs ``Token authentication is
  enabled for this Ray cluster...`` at WARNING. :func:`quiet_ray_token_auth_notice` drops that
  record from that logger only: other Ray warnings (and the one for a cluster where token
  authentication is *disabled*) still show.
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


class _DropTokenAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(RAY_TOKEN_AUTH_NOTICE)


_RAY_FILTER = _DropTokenAuthNotice()


def quiet_ray_token_auth_notice() -> None:
    """Drop Ray's "token authentication is enabled" notice (call before ``ray.init``; once is enough)."""
    logger = logging.getLogger(RAY_TOKEN_AUTH_LOGGER)
    if _RAY_FILTER not in logger.filters:
        logger.addFilter(_RAY_FILTER)
