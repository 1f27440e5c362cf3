"""The broker the user configured: an explicit URL, else EVALFLEET_BROKER_URL, else
None. None is "embedded mode" to the CLI; a bare Celery worker looks further
(worker.broker). A configured URL is checked here, once, so a malformed one is a
clear error wherever it is used.

The password may come apart from the URL, so that it is in no process's arguments
or environment: a file (`--broker-password-file`, EVALFLEET_BROKER_PASSWORD_FILE,
which may be a pipe: /dev/fd/N), else EVALFLEET_BROKER_PASSWORD (fleet.broker
blanks it once read). Either replaces a password in the URL.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from core.errors import BrokerURLError

ENV_BROKER = "EVALFLEET_BROKER_URL"
ENV_PASSWORD = "EVALFLEET_BROKER_PASSWORD"
ENV_PASSWORD_FILE = "EVALFLEET_BROKER_PASSWORD_FILE"
# The schemes both Celery's broker (kombu) and redis-py read; redis+socket is kombu's
# name for a Unix socket (the embedded Redis listens on one), redis-py's unix://
# (redis_py_url). redis-py's unix:// itself is not one: kombu knows no such transport.
SOCKET = "redis+socket"
SCHEMES = ("redis", "rediss", SOCKET)


def configured_broker(explicit: str | None = None, password_file: str | None = None) -> str | None:
    """The broker the user asked for, password included, or None for embedded mode."""
    url = explicit or os.environ.get(ENV_BROKER) or None
    password = configured_password(password_file)
    if url is None:
        if password is not None:
            raise BrokerURLError(
                f"a broker password is given but no broker URL (--broker or {ENV_BROKER})"
            )
        return None
    url = with_tls_default(checked_broker_url(url))
    return url if password is None else with_password(url, password)


def configured_password(password_file: str | None = None) -> str | None:
    """The password given apart from the URL: its file's first line, else the variable."""
    path = password_file or os.environ.get(ENV_PASSWORD_FILE)
    if not path:
        return os.environ.get(ENV_PASSWORD) or None
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BrokerURLError(f"cannot read the broker's password file {path}: {exc}") from None
    if not lines or not lines[0]:
        raise BrokerURLError(f"the broker's password file {path} is empty")
    return lines[0]


def checked_broker_url(url: str) -> str:
    """`url` if it is a Redis URL we can use; else BrokerURLError. The message never
    repeats the URL, which may hold a password."""
    where = f"the broker URL (--broker or {ENV_BROKER})"
    example = "e.g. redis://host:6379/0 with --broker-password-file, or rediss:// for TLS"
    scheme, separator, _ = url.partition("://")
    if not separator or scheme not in SCHEMES:
        found = f"it starts with {scheme}://" if separator else "it has no scheme"
        schemes = " or ".join(f"{s}://" for s in SCHEMES)
        raise BrokerURLError(f"{where} must start with {schemes} ({found}); {example}")
    # Here, not at the top: `--help` of every command imports this module's names.
    import redis.connection

    try:
        redis.connection.parse_url(redis_py_url(url))
    except ValueError as exc:
        raise BrokerURLError(f"{where} is malformed ({exc}); {example}") from None
    database = urlsplit(url).path.strip("/")
    if scheme != SOCKET and database and not database.isdigit():
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


def with_password(url: str, password: str | None) -> str:
    """`url` with `password` (quoted) in place of its own; None: without one."""
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    credentials = f"{user}:{quote(password, safe='')}@" if password else f"{user}@" * bool(user)
    # Not urlunsplit: it drops the empty host of redis+socket:///path.
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{credentials}{host}{parts.path}{query}"


def redis_py_url(url: str) -> str:
    """The URL redis-py reads for a broker URL: kombu's redis+socket://:PW@/path/sock
    ?virtual_host=N is redis-py's unix://:PW@/path/sock?db=N; others are the same."""
    scheme, _, rest = url.partition("://")
    if scheme != SOCKET:
        return url
    location, _, query = rest.partition("?")
    pairs = [("db" if k == "virtual_host" else k, v) for k, v in parse_qsl(query)]
    return f"unix://{location}" + (f"?{urlencode(pairs)}" if pairs else "")
