"""A tier's intra-scenario correlation computed apart from evalfleet's code, for the
tests that check what planning assumed: statsmodels' cluster-robust standard error."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import statsmodels.api as sm


def implied_icc(outcomes: Sequence[Sequence[float]]) -> float:
    """The intra-scenario correlation the outcomes imply (one sequence a scenario):
    (design effect - 1) / (runs per scenario - 1) within [0, 1], the design effect
    (CR0 SE / SE of as many independent runs)^2 (docs/METRICS.md, "Across scenarios")."""
    values = np.array([x for cell in outcomes for x in cell], dtype=float)
    groups = np.repeat(np.arange(len(outcomes)), [len(cell) for cell in outcomes])
    cr0 = (
        sm.OLS(values, np.ones((len(values), 1)))
        .fit(cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False})
        .bse[0]
    )
    deff = (cr0 / (values.std() / np.sqrt(len(values)))) ** 2
    return float(min(1.0, max(0.0, (deff - 1) / (len(values) / len(outcomes) - 1))))
