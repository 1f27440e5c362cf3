"""The one redactor: secret values out of every text and record that is stored,
rendered, or sent to the judge.

The secrets are the values of every variable the matrix names (`secret_env`,
the judge's `api_key_env`, every agent's `api_key_env`), of every variable
whose name looks secret (`looks_secret`: an agent given one by `pass_env`, or
one that reads it from elsewhere, prints it to no stored text), and the broker URL in
each form it can leak in: whole, without its query, its password alone (as
written and percent-decoded), and with the password masked as kombu and the
CLI print it. Each becomes MARKER.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, get_args
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel

from core.evidence.text import each_text

if TYPE_CHECKING:  # the store's readers import the redaction, not the matrix
    from core.matrix import Matrix

MARKER = "[REDACTED]"
# Shorter values would redact ordinary words; real keys and passwords are longer.
MIN_SECRET_CHARS = 6

R = TypeVar("R", bound=BaseModel)

# Names of credentials: API keys, tokens, passwords, and the cloud providers' variables
# (AWS_SESSION_TOKEN, GOOGLE_APPLICATION_CREDENTIALS, AZURE_CLIENT_SECRET, ...).
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|^AWS_|^AZURE_|^GOOGLE_|^GCP_", re.IGNORECASE
)


@functools.lru_cache(maxsize=4096)
def looks_secret(name: str) -> bool:
    # Cached: every run asks it of each of the worker's variables, which rarely change.
    return _SECRET_NAME.search(name) is not None


def secret_values(
    matrix: Matrix, environ: Mapping[str, str], broker_url: str | None = None
) -> list[str]:
    """What to redact for runs of `matrix`: its secret variables' values, those of
    `environ`'s variables whose names look secret, and the broker URL."""
    names = set(matrix.secret_env) | {name for name in environ if looks_secret(name)}
    if matrix.judge is not None and matrix.judge.api_key_env:
        names.add(matrix.judge.api_key_env)
    for tier in matrix.tiers:
        key_env = matrix.agent_for(tier).api_key_env
        if key_env:
            names.add(key_env)
    values = [environ.get(name, "") for name in names]
    return worth_redacting([*values, *broker_url_forms(broker_url)])


def broker_url_forms(url: str | None) -> list[str]:
    """Every form of a broker URL that gives its password or its address away."""
    if not url:
        return []
    bare = url.split("?", 1)[0]
    forms = [url, bare]
    password = urlsplit(url).password
    if password:
        forms += [password, unquote(password)]
        for mask in ("**", "***"):  # kombu's, and the CLI's (scheduler.cli)
            forms += [u.replace(f":{password}@", f":{mask}@") for u in (url, bare)]
    return forms


def worth_redacting(values: Iterable[str]) -> list[str]:
    # Longest first: a secret that contains another is taken out whole.
    return sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str | None]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MARKER)
    return text


def redact_record(record: R, secrets: Sequence[str]) -> R:
    """The record with the secrets taken out of every string in it, keys included.

    Applied to gate results before the judge sees them and to the RunResult
    before it leaves the worker: whatever field a command's output or an error
    ends up in, no secret value is sent or stored.
    """
    if not secrets or not _mentions(record.model_dump_json(), secrets):
        return record
    text = record.model_dump(mode="json")
    # The models' own field names stay: a secret inside one ("x" in "text") made the
    # record one that no longer reads back; a dict's own keys (file names) are redacted.
    fields = field_names(type(record))
    return type(record).model_validate(each_text(text, lambda s: redact(s, secrets), fields))


@functools.cache
def field_names(model: type[BaseModel]) -> frozenset[str]:
    """The field names of `model` and of every model its fields hold, however nested."""
    names: set[str] = set()
    seen: set[type[BaseModel]] = set()
    stack: list[Any] = [model]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item in seen:
                continue
            seen.add(item)
            names.update(item.model_fields)
            stack.extend(field.annotation for field in item.model_fields.values())
        else:
            stack.extend(get_args(item))
    return frozenset(names)


def _mentions(text: str, secrets: Sequence[str]) -> bool:
    """Whether the record's JSON may hold a secret: one substring search each, where
    the walk below costs a run ~1 ms a record (the broker URL is always a secret).
    A secret that JSON writes escaped (a quote, a backslash, a control character)
    is not searched for as written: such a record is always walked."""
    return any(secret in text or _ESCAPED.search(secret) for secret in secrets)


_ESCAPED = re.compile(r'["\\\x00-\x1f]')
