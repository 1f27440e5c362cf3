"""What a user chooses among in the statistics, and the defaults: named here, apart
from the statistics themselves, because the CLI's options show them in `--help`,
which must not import what only computing needs (the standard library's
`statistics` alone is ~50 ms of a cold start)."""

from __future__ import annotations

from typing import Literal

Correction = Literal["holm", "bh", "none"]
CORRECTIONS: tuple[Correction, ...] = ("holm", "bh", "none")
# A comparison's correction and significance level unless told otherwise.
DEFAULT_CORRECTION: Correction = "holm"
DEFAULT_ALPHA = 0.05
# The intra-scenario correlation planning assumes unless told (`validate --icc`): runs
# of one scenario are alike well beyond chance in most agent experiments.
PLANNING_ICC = 0.3
