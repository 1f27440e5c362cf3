"""Is an error an agent CLI reported the model provider's outage rather than the agent's failure?

Rate limits, overload, exhausted quota, server errors and authentication failures
(HTTP 401/403/429/5xx, Anthropic's `overloaded_error`, Gemini's RESOURCE_EXHAUSTED,
a missing API key) say nothing about the agent under test: such a run is an
infrastructure error, tried again later, never a failed result. A 400 (a bad
request, a context too long) is the agent's own.

The wait the provider asked for, when the message states one ("retry in 27s",
"Retry-After: 30", "resets in 5 minutes", Claude's "limit reached|<epoch>"), is
returned so the retry honours it.
"""

from __future__ import annotations

import re
import time

# An HTTP status counts only where it is said to be one ("API Error: 429", "status:
# 503", "HTTP 401"): "500 lines" in an agent's own error is no outage.
_OUTAGE = re.compile(
    r"(?i)(?:api error|status|http|code|error)\W{0,3}(?:429|401|403|500|502|503|504|529)\b"
    r"|rate[ _-]?limit|too many requests|overloaded|quota|resource[ _]exhausted"
    r"|usage limit|over capacity|service unavailable|authenticat|unauthori[sz]ed"
    r"|invalid[ _]api[ _]key|missing environment variable:? `?\w*API_KEY"
)
_WAIT = re.compile(
    r"(?i)(?:retry(?:[ -]after)?|try again|resets?)\s*(?:in|after|:)?\s*"
    r"(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)\b"
)
_EPOCH = re.compile(r"\|(\d{10})\b")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def outage_of(message: str | None) -> str | None:
    """`message` when it reports a provider outage, else None."""
    if message and _OUTAGE.search(message):
        return message
    return None


def stated_wait_s(message: str, now: float | None = None) -> float | None:
    """Seconds the provider asked to wait, when `message` says."""
    if found := _WAIT.search(message):
        unit = found.group(2).lower()
        factor = _UNIT_S["ms"] if unit == "ms" else _UNIT_S.get(unit[0], 1.0)
        return float(found.group(1)) * factor
    if found := _EPOCH.search(message):
        return max(int(found.group(1)) - (now if now is not None else time.time()), 0.0)
    return None
