"""What the user configured through the environment: the broker, and the numeric settings.

The broker: an explicit URL, else EVALFLEET_BROKER_URL, else None. None is
"embedded mode" to the CLI; a bare Celery worker looks further
(worker/broker.py). A configured URL is checked here, once, so a malformed one
is a clear error wherever it is used. The numeric EVALFLEET_* settings
(`setting`) are checked where read, each against what it can be.
"""

from __future__ import annotations

import math
import os
from typing import Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import redis

ENV_BROKER = "EVALFLEET_BROKER_URL"
# The schemes both Celery's broker (kombu) and redis-py read. redis-py's unix://
# is not one: kombu knows no such transport.
SCHEMES = ("redis", "rediss")


class BrokerURLError(ValueError):
    """A broker URL that Celery and redis-py cannot use; the message names the fix."""


class SettingError(ValueError):
    """An EVALFLEET_* number that is not one; the message names the variable and the fix."""


# What a numeric setting may be: a whole count of 1 or more, seconds above 0 (an
# interval: 0 would spin), or seconds of 0 or more (a wait that may be none).
Kind = Literal["count", "interval", "wait"]
_KIND_WORDS = {
    "count": "a whole number of 1 or more",
    "interval": "a number of seconds above 0",
    "wait": "a number of seconds, 0 or more",
}
# Every numeric EVALFLEET_* setting: its default and kind (docs/RELIABILITY.md lists them).
NUMBERS: dict[str, tuple[float, Kind]] = {
    "EVALFLEET_MAX_RUNS": (200_000, "count"),  # the most runs one experiment may have
    "EVALFLEET_MAX_CONFIG_BYTES": (1_000_000, "count"),  # the largest matrix or rubric file
    "EVALFLEET_VISIBILITY_TIMEOUT": (6 * 3600, "interval"),  # Redis redelivers unacked after
    "EVALFLEET_SWEEP_S": (10, "interval"),  # seconds between a worker's recovery sweeps
    "EVALFLEET_OUTAGE_BACKOFF_S": (30, "wait"),  # the first wait after a provider outage
    "EVALFLEET_SHUTDOWN_GRACE": (30, "wait"),  # seconds a leaving worker lets its runs finish
    # How long a worker holds task events to publish them together (Flower is that late).
    "EVALFLEET_EVENTS_LINGER_S": (0.05, "wait"),
}


def setting(name: str) -> float:
    """The number in environment variable `name`, else its default. Read when used,
    not at import, so that a bad value is an error the CLI and the worker report
    (exit 2; a worker checks them all before it starts), not a traceback."""
    default, kind = NUMBERS[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    fits = {
        "count": value >= 1 and value.is_integer(),
        "interval": 0 < value < math.inf,
        "wait": 0 <= value < math.inf,
    }[kind]
    if not fits:  # NaN fits none
        raise SettingError(
            f"{name}={raw!r} is not {_KIND_WORDS[kind]}: set it to one (default {default:g}) "
            "or unset it"
        )
    return value


def check_settings() -> None:
    """SettingError for the first numeric setting that is not a number."""
    for name in NUMBERS:
        setting(name)


def configured_broker(explicit: str | None = None) -> str | None:
    """The broker the user asked for, or None for embedded mode."""
    url = explicit or os.environ.get(ENV_BROKER) or None
    return with_tls_default(checked_broker_url(url)) if url else None


def checked_broker_url(url: str) -> str:
    """`url` if it is a Redis URL we can use; else BrokerURLError. The message never
    repeats the URL, which may hold a password."""
    where = f"the broker URL (--broker or {ENV_BROKER})"
    example = "e.g. redis://:PASSWORD@host:6379/0, or rediss:// for TLS"
    scheme, separator, _ = url.partition("://")
    if not separator or scheme not in SCHEMES:
        found = f"it starts with {scheme}://" if separator else "it has no scheme"
        schemes = " or ".join(f"{s}://" for s in SCHEMES)
        raise BrokerURLError(f"{where} must start with {schemes} ({found}); {example}")
    try:
        redis.connection.parse_url(url)
    except ValueError as exc:
        raise BrokerURLError(f"{where} is malformed ({exc}); {example}") from None
    database = urlsplit(url).path.strip("/")
    if database and not database.isdigit():
        raise BrokerURLError(
            f"{where} is malformed (the database after the host must be a number); {example}"
        )
    return url


def with_tls_default(url: str) -> str:
    """A rediss:// URL verifies the server's certificate unless it says otherwise.

    Celery's Redis result backend refuses a rediss:// URL without an explicit
    `ssl_cert_reqs`; the secure choice is the default here, so
    `rediss://:password@host:6380/0` just works. Add `ssl_ca_certs=/path/ca.pem`
    for a private CA, or `ssl_cert_reqs=none` to skip verification.
    """
    parts = urlsplit(url)
    if parts.scheme != "rediss" or "ssl_cert_reqs" in dict(parse_qsl(parts.query)):
        return url
    query = f"{parts.query}&ssl_cert_reqs=required" if parts.query else "ssl_cert_reqs=required"
    return urlunsplit(parts._replace(query=query))
