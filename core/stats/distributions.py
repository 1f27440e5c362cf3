"""The tail probabilities and quantiles the tests need beyond the normal, in pure Python
(scipy.stats checks them in the tests only).

- Student's t on any positive degrees of freedom: its two-sided tail is the
  regularized incomplete beta I_x(df/2, 1/2), x = df / (df + t^2);
- the chi-squared upper tail on k degrees of freedom: the regularized upper
  incomplete gamma Q(k/2, x/2).

Both functions are evaluated as in Numerical Recipes (2007, sections 6.2 and
6.4): a series where it converges fast and Lentz's continued fraction elsewhere,
to a relative error near 1e-14.
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 10_000


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > _TINY else _TINY)
            c = 1 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge at a={a}, b={b}, x={x}")


def incomplete_beta(a: float, b: float, x: float, complement: float | None = None) -> float:
    """The regularized incomplete beta function I_x(a, b). `complement`: 1 - x when the
    caller knows it more exactly than 1 - x rounds (x near 1)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be within [0, 1], got {x}")
    y = 1 - x if complement is None else complement
    if x == 0.0 or y == 0.0:
        return 0.0 if x == 0.0 else 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    front = math.exp(log_front)
    # The fraction converges fast below (a + 1) / (a + b + 2); above, by symmetry.
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, y) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t on `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2, 0.5, df / (df + t * t), t * t / (df + t * t))


def t_quantile(probability: float, df: float) -> float:
    """The t with P(T <= t) = probability, on `df` degrees of freedom (bisection on the
    two-sided tail: 200 halvings reach the float's resolution from any bracket)."""
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be within (0, 1), got {probability}")
    if probability == 0.5:
        return 0.0
    tail = 2 * min(probability, 1 - probability)
    high = 1.0
    while t_two_sided(high, df) > tail:
        high *= 2
    low = 0.0
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-15 * high:
            break
    quantile = (low + high) / 2
    return quantile if probability > 0.5 else -quantile


def _gamma_series(a: float, x: float) -> float:
    """P(a, x) by its series (x < a + 1)."""
    term = total = 1 / a
    ap = a
    for _ in range(_MAX_TERMS):
        ap += 1
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            return total * math.exp(-x + a * math.log(x) - math.lgamma(a))
    raise ArithmeticError(f"incomplete gamma series did not converge at a={a}, x={x}")


def _gamma_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction (x >= a + 1), modified Lentz."""
    b = x + 1 - a
    c, d = 1 / _TINY, 1 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > _TINY else _TINY)
        c = b + an / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        if abs(d * c - 1) < _EPS:
            return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h
    raise ArithmeticError(f"incomplete gamma fraction did not converge at a={a}, x={x}")


def chi2_sf(x: float, df: float) -> float:
    """P(X >= x) for chi-squared on `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    a, half = df / 2, x / 2
    if half == 0:  # x underflowed
        return 1.0
    if half < a + 1:
        return max(0.0, 1 - _gamma_series(a, half))
    return _gamma_fraction(a, half)
