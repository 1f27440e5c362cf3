"""The broker the user configured: an explicit URL, else EVALFLEET_BROKER_URL, else
None. None is "embedded mode" to the CLI; a bare Celery worker looks further
(worker.broker). A configured URL is checked here, once, so a malformed one is a
clear error wherever it is used."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import redis

from core.errors import BrokerURLError

ENV_BROKER = "EVALFLEET_BROKER_URL"
# The schemes both Celery's broker (kombu) and redis-py read. redis-py's unix://
# is not one: kombu knows no such transport.
SCHEMES = ("redis", "rediss")


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
