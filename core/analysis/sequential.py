"""Adaptive runs: when a tier x scenario cell has its answer, valid however often it is looked at.

Each cell's pass rate gets a confidence sequence: the beta-binomial mixture of
Robbins (1970), here with a uniform Beta(1, 1) prior. For a true pass rate p,
M_n(p) = B(1 + S, 1 + n - S) / (p^S (1 - p)^(n - S)) (S passes in n runs) is a
nonnegative martingale with M_0 = 1, so by Ville's inequality the chance it ever
reaches 1/alpha is at most alpha: the set {p : M_n(p) < 1/alpha} holds p at every
n at once with probability 1 - alpha, whenever the runs are looked at and however
the decision to stop depends on them. A naive "stop when p < 0.05" has no such
guarantee: looked at after every wave it crosses 0.05 by chance far more often.

A cell stops when (`until`):
- width: its interval (at 1 - alpha) is narrower than the width;
- decided: its interval and the baseline cell's of the same scenario, each at
  1 - alpha/2, are disjoint: under no difference (one common p) that needs p
  outside one of the two, which happens with probability at most alpha/2 + alpha/2;
- or it has `max` runs. The baseline's cell runs while another tier's cell of its
  scenario runs (it is what they are compared with).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from core.matrix import AdaptiveRuns

PROCEDURE = (
    "always-valid beta-binomial mixture confidence sequences (Robbins' mixture, Beta(1, 1) "
    "prior; Ville's inequality): a cell stops when its pass-rate interval at 1 - alpha is "
    "narrower than `width`, or when its interval and the baseline's, each at 1 - alpha/2, "
    "are disjoint (`decided`), else at `max` runs"
)
_BISECTIONS = 40  # the edges to within 1e-12

Cell = tuple[str, str]  # (tier, scenario)


def log_evidence(p: float, passes: int, runs: int) -> float:
    """log M_n(p): how strongly the runs speak against a true pass rate p."""
    fails = runs - passes
    mixture = math.lgamma(1 + passes) + math.lgamma(1 + fails) - math.lgamma(2 + runs)
    if (p <= 0.0 and passes) or (p >= 1.0 and fails):
        return math.inf
    likelihood = (passes * math.log(p) if passes else 0.0) + (
        fails * math.log1p(-p) if fails else 0.0
    )
    return mixture - likelihood


def interval(passes: int, runs: int, alpha: float) -> tuple[float, float]:
    """The confidence sequence's pass-rate interval after `runs` runs, `passes` of them passed."""
    if runs == 0:
        return 0.0, 1.0
    threshold = math.log(1 / alpha)
    centre = passes / runs  # where the evidence is least: the interval always holds it

    def inside(p: float) -> bool:
        return log_evidence(p, passes, runs) < threshold

    def edge(outer: float) -> float:
        if inside(outer):
            return outer
        near, far = centre, outer
        for _ in range(_BISECTIONS):
            middle = (near + far) / 2
            near, far = (middle, far) if inside(middle) else (near, middle)
        return near

    return edge(0.0), edge(1.0)


@dataclass(frozen=True)
class CellRuns:
    """What an adaptive cell has so far."""

    sent: int  # runs sent, whatever became of them
    counted: int  # runs in the statistics (RunStatus.counted)
    passes: int


def stop_reason(
    cell: CellRuns, baseline: CellRuns | None, rule: AdaptiveRuns, others_open: bool
) -> str | None:
    """Why `cell` stops now, or None while it runs on. `baseline`: the baseline tier's
    cell of the same scenario (None for the baseline's own); `others_open`: for the
    baseline's cell, whether another tier's cell of its scenario still runs."""
    until = rule.until
    if until.width is not None:
        low, high = interval(cell.passes, cell.counted, rule.alpha)
        if high - low < until.width:
            return f"pass-rate interval [{low:.3f}, {high:.3f}] narrower than {until.width:g}"
    if until.decided and baseline is not None:
        low, high = interval(cell.passes, cell.counted, rule.alpha / 2)
        base_low, base_high = interval(baseline.passes, baseline.counted, rule.alpha / 2)
        if low > base_high:
            return "decided: better than the baseline"
        if high < base_low:
            return "decided: worse than the baseline"
    if cell.sent >= rule.max:
        return f"reached max ({rule.max} runs)"
    if until.decided and baseline is None and not others_open:
        return "every tier compared with it has stopped"
    return None


@dataclass(frozen=True)
class Wave:
    closing: dict[Cell, str]  # cells that stop now, and why
    runs: dict[Cell, int]  # runs each open cell gets next, least settled cell first


def next_wave(
    rule: AdaptiveRuns, baseline_tier: str, cells: Mapping[Cell, CellRuns], closed: set[Cell]
) -> Wave:
    """After a wave has finished: which cells stop and what the others get next. `cells`:
    every adaptive cell of the experiment; `closed`: those stopped before."""
    open_cells = [c for c in cells if c not in closed]
    closing: dict[Cell, str] = {}
    # Other tiers first: the baseline's cell runs as long as one of them does.
    for tier, scenario in sorted(open_cells, key=lambda c: c[0] == baseline_tier):
        base = (baseline_tier, scenario)
        others_open = any(
            c[1] == scenario and c[0] != baseline_tier and c not in closing for c in open_cells
        )
        reason = stop_reason(
            cells[tier, scenario],
            cells.get(base) if tier != baseline_tier else None,
            rule,
            others_open,
        )
        if reason is not None:
            closing[tier, scenario] = reason
    still = [c for c in open_cells if c not in closing]

    def width(c: Cell) -> float:
        low, high = interval(cells[c].passes, cells[c].counted, rule.alpha)
        return high - low

    ordered = sorted(still, key=lambda c: (-width(c), c))
    return Wave(closing, {c: min(rule.step, rule.max - cells[c].sent) for c in ordered})
