"""Reference implementations the tests check evalfleet's statistics against, as the
tests call them.

statsmodels' multipletests runs a full garbage collection (gc.collect) after every
Holm adjustment: in a test process, whose heap holds hypothesis, scipy and
statsmodels, that took ~150 ms a call, most of the CPU of the tests that use it.
The adjustment does not depend on it, so the oracle here skips it.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from statsmodels.stats.multitest import multipletests as _multipletests


def multipletests(pvalues: Sequence[Any], method: str, **options: Any) -> Any:
    """statsmodels.stats.multitest.multipletests, without its collection."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        return _multipletests(pvalues, method=method, **options)
    finally:
        gc.collect = collect
