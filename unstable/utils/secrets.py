"""API keys: read from the environment only, and never written anywhere.

A run's settings (``build()`` arguments, YAML configs) are saved to ``config.json`` and W&B, so a
setting named like a key (``api_key``, ``openai_api_key``, ``token``...) is rejected with a message
that names the environment variable to use. Text that leaves the process and may carry a key (an
API error that echoes the request's key, a failed game's message and traceback, an API reply) goes
through :func:`redact` first: it replaces the values of secret-looking environment variables
(``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``) and key-shaped strings (``sk-...``,
``Bearer ...``) with ``[REDACTED]``. A value is also found without its provider prefix (``sk-``,
``sk-proj-``...), URL-encoded, JSON- or Python-escaped, HTML-escaped, in hex and base64-encoded
(standard or URL-safe, at any alignment in a longer encoded text, as in a ``Basic`` auth header an
error body echoes), whatever the key's length from :data:`MIN_SECRET_LEN` on: see :func:`secret_forms`.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"
#: Environment variables API opponents read their key from (see :mod:`unstable.policies.api`).
API_KEY_ENV_VARS = ("OPENROUTER_API_KEY", "OPENAI_API_KEY")
#: Shorter values are not redacted (a placeholder key such as ``EMPTY`` would mangle ordinary text).
MIN_SECRET_LEN = 8

#: Prefixes providers put before a key's random part; the part after one is a secret too.
KEY_PREFIXES = ("sk-", "sk-proj-", "sk-svcacct-", "sk-admin-", "sk-or-", "sk-or-v1-", "sk-ant-", "sk-ant-api03-",
                "pk-", "rk-", "hf_", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxp-", "glpat-")
#: A key without its prefix, or a piece of its base64, is redacted only from this length on: shorter
#: pieces would match ordinary text and give little away. A key of 8 characters (``sk-`` and 5) still
#: has its 5 redacted; the key itself is redacted from :data:`MIN_SECRET_LEN` on, whatever it is.
MIN_DERIVED_LEN = 4

_SECRET_ENV_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_SECRET_SETTING = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|apikey|secret(?:[_-]key)?|password|passwd|token|access[_-]token|auth[_-]token)$",
    re.IGNORECASE,
)
_KEY_SHAPES = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"),  # OpenAI / OpenRouter / Anthropic style
    re.compile(r"(?i)\bBearer\s+[A-Za-z0-9_\-.=:+/]{8,}"),  # an Authorization header value
)


class SecretInConfigError(ValueError):
    """A key was given as a setting; keys come only from environment variables."""


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-looking environment variables, longest first (so overlaps redact fully).

    Values that are existing paths (``GOOGLE_APPLICATION_CREDENTIALS=/home/me/creds.json``) are not
    secrets themselves; treating them as such would refuse every run directory beneath them.
    """
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items()
              if _SECRET_ENV_NAME.search(k) and len(v.strip()) >= MIN_SECRET_LEN and not os.path.exists(v)}
    return sorted(values, key=len, reverse=True)


@functools.lru_cache(maxsize=64)
def secret_forms(value: str) -> tuple[str, ...]:
    """The strings that give ``value`` away, longest first: the value itself and the value after
    each known prefix it starts with (:data:`KEY_PREFIXES`), each as it is, escaped as text that
    carries it may escape it (:func:`_escaped_forms`: URL, JSON, Python, HTML, hex), and the base64 of
    each of those.

    Base64 of a longer text that holds the value encodes it differently at each of the three byte
    alignments, and the characters at its edges mix in the neighbouring bytes; so each alignment's
    encoding is taken without those edge characters (what every text holding the value encodes to,
    whatever surrounds it), in the standard and the URL-safe alphabet.
    """
    plain = {value} | {value[len(p) :] for p in KEY_PREFIXES if value.startswith(p)}
    plain = {s for s in plain if s == value or len(s) >= MIN_DERIVED_LEN}
    forms = set(plain)
    for secret in plain:
        forms |= _escaped_forms(secret)
        for pad in range(3):
            encoded = base64.b64encode(b"\0" * pad + secret.encode()).decode().rstrip("=")
            # Characters 0..2 hold the padding bytes (none, 2 or 3 of them); the last one holds the
            # byte after the value unless the value ends a 3-byte group.
            core = encoded[(0, 2, 3)[pad] : len(encoded) - ((pad + len(secret.encode())) % 3 != 0)]
            if len(core) >= MIN_DERIVED_LEN:
                forms |= {core, core.replace("+", "-").replace("/", "_")}
    return tuple(sorted(forms, key=len, reverse=True))


def _escaped_forms(secret: str) -> set[str]:
    """``secret`` as text that carries it may have escaped it: URL-encoded (a query string, a form
    body), JSON-escaped (ASCII or not, ``/`` as ``\\/`` too), Python's ``repr``, HTML, and hex."""
    escaped = {urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret), urllib.parse.quote_plus(secret),
               json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1],
               html.escape(secret), secret.encode().hex(), secret.encode().hex().upper()}
    escaped |= {e.replace("/", "\\/") for e in escaped}
    return escaped


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with every known secret (in each of its :func:`secret_forms`) and key-shaped
    string replaced by ``[REDACTED]``."""
    if not isinstance(text, str) or not text:
        return text
    values = (*secret_values(), *(e for e in extra if e and len(e) >= MIN_SECRET_LEN))
    for form in sorted({f for value in values for f in secret_forms(value)}, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    for pattern in _KEY_SHAPES:
        text = pattern.sub(REDACTED, text)
    return text


def is_secret_setting(name: Any) -> bool:
    """Whether a setting's name is a key's (``api_key``, ``OPENAI_API_KEY``, ``hf_token``; not ``max_tokens``)."""
    return isinstance(name, str) and bool(_SECRET_SETTING.search(name))


def reject_secret_settings(settings: Any, where: str) -> None:
    """Raise :class:`SecretInConfigError` if ``settings`` (nested mappings/lists) names a key or holds one.

    ``where`` prefixes the path in the message (``"build() argument "``, ``"config file 'x.yaml': "``).
    The message names the setting but never echoes its value.
    """
    secrets = secret_values()
    for path, key, value in _walk(settings, ""):
        if is_secret_setting(key):
            raise SecretInConfigError(
                f"{where}{path!s} looks like an API key setting; keys are never taken from configs or "
                f"build() arguments (those are saved to config.json and W&B). Set the environment variable "
                f"{' or '.join(API_KEY_ENV_VARS)} instead (an API opponent reads OPENROUTER_API_KEY)")
        if isinstance(value, str) and any(s in value for s in secrets):
            raise SecretInConfigError(
                f"{where}{path!s} holds the value of a secret environment variable (an API key?); it would "
                f"be saved to config.json and W&B. Keys are read from the environment only: remove it")


def _walk(value: Any, path: str):
    if isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            yield sub, key, item
            yield from _walk(item, sub)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            sub = f"{path}[{i}]"
            yield sub, None, item
            yield from _walk(item, sub)
