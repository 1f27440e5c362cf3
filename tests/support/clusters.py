"""Figures across scenarios computed apart from evalfleet's code, for the tests that
check it: a tier's intra-scenario correlation from statsmodels' cluster-robust standard
error, and the Mantel-Haenszel risk difference with its variance from the published
formula in exact arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

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


def sato_risk_difference(
    tables: Sequence[tuple[int, int, int, int]],
) -> tuple[Fraction, Fraction]:
    """The Mantel-Haenszel common risk difference and its variance, exactly (rational
    arithmetic), written from Sato, Greenland & Robins (1989), "On the variance
    estimator for the Mantel-Haenszel risk difference", Biometrics 45:1323-1324, in
    Greenland & Rothman's notation (Modern Epidemiology, 3rd ed., 2008, p. 275).
    `tables`: per stratum i, (A1i, N1i, A0i, N0i): A1i cases of N1i exposed (the tier's
    passes of its runs), A0i of N0i unexposed (the baseline's).

        Ti = N1i + N0i
        RD_MH = sum_i (A1i N0i - A0i N1i) / Ti  /  sum_i N1i N0i / Ti
        P_i = (N1i^2 A0i - N0i^2 A1i + N1i N0i (N0i - N1i) / 2) / Ti^2
        Q_i = (A1i (N0i - A0i) + A0i (N1i - A1i)) / (2 Ti)
        Var(RD_MH) = (RD_MH sum_i P_i + sum_i Q_i) / (sum_i N1i N0i / Ti)^2
    """
    numerator = weights = p = q = Fraction(0)
    for a1, n1, a0, n0 in tables:
        t = n1 + n0
        numerator += Fraction(a1 * n0 - a0 * n1, t)
        weights += Fraction(n1 * n0, t)
        p += Fraction(2 * (n1 * n1 * a0 - n0 * n0 * a1) + n1 * n0 * (n0 - n1), 2 * t * t)
        q += Fraction(a1 * (n0 - a0) + a0 * (n1 - a1), 2 * t)
    rd = numerator / weights
    return rd, (rd * p + q) / (weights * weights)
