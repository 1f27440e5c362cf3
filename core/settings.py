"""The numeric EVALFLEET_* settings: each read where it is used and checked against
what it can be, so that a bad value is one clear line, never a traceback at import.
The broker URL, the other thing a user configures through the environment, is
checked in core.broker_url."""

from __future__ import annotations

import math
import os
from typing import Literal

from core.errors import SettingError

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
    # How long this user's warm process (scheduler.warm) waits for a command before leaving.
    "EVALFLEET_WARM_IDLE_S": (900, "interval"),
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
