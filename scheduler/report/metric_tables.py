"""The tables of the metrics beside the headline: ProjectScylla's cross-tier figures,
pass@k, the interaction metrics, the guidance comparison of one scenario, context
growth, each tier's ProjectScylla metrics, and where an adaptive experiment's cells stopped."""

from __future__ import annotations

from collections.abc import Iterable

from core.analysis.group import PASS_K
from core.metrics.catalog import INTERACTION_METRICS, RUN_METRICS
from core.metrics.process import DEFINITIONS as PROCESS_DEFINITIONS
from core.results.report import ExperimentReport, Statistics, TierReport
from core.wording import plural
from scheduler.report.formatting import ALL, NOT_DEFINED, Table, cells, num, pct, per_pass

# Columns of per-call context growth in a table; the HTML chart shows every call.
CONTEXT_CALLS_SHOWN = 10


def cross_tier(report: ExperimentReport) -> Table:
    """ProjectScylla's cross-tier figures: each metric's uplift, consistency, the cheapest
    tier per pass and the best value (docs/METRICS.md defines them and their edge cases)."""
    c = report.cross_tier
    rows = []
    for tier_id, t in report.tiers.items():
        up = c.uplift.get(tier_id)
        if tier_id == c.baseline:
            changes = ["baseline"] * 4
        elif up is None:
            changes = ["n/a"] * 4
        else:
            changes = [pct(up.pass_rate), pct(up.impl_rate), pct(up.composite), pct(up.cost_change)]
        rows.append([tier_id, *changes, num(t.consistency), per_pass(t.cost_of_pass)])
    frontier, value = _frontier_and_value(report)
    return Table(
        f"Cross-tier against the baseline ({c.baseline})",
        [
            "tier",
            "pass rate uplift",
            "impl rate uplift (median)",
            "composite uplift (median)",
            "cost change (median)",
            "consistency (composite)",
            "cost of pass $",
        ],
        rows,
        [
            "; ".join(note for note in (frontier, value) if note),
            f"variance of the tiers' median impl rate {num(c.impl_rate_variance, 4)}, "
            f"median pass_rate {num(c.pass_rate_variance, 4)}",
            "uplift = (tier - baseline) / baseline, n/a where the baseline's figure is 0; "
            "consistency = 1 - std/mean of the composite score, clamped to [0, 1]",
        ],
    )


def add_prices(tiers: Iterable[TierReport]) -> str:
    """What makes the tiers' unknown costs known: a price for each model their runs
    named that has none, named where the runs recorded it; for the runs whose
    transcript could not be read, a look at it; and for those whose transcript recorded
    no usage, a transcript that records it (no price alone would make either known)."""
    tiers = list(tiers)
    unread = sum(tier.cost_unread_runs for tier in tiers)
    unrecorded = sum(tier.cost_unrecorded_runs for tier in tiers)
    models = sorted({model for tier in tiers for model in tier.unpriced_models})
    fixes = []
    if models or sum(tier.cost_unknown_runs for tier in tiers) > unread + unrecorded:
        named = f": {', '.join(models)}" if models else ""
        fixes.append(
            f"add each model's price under `pricing:` in the matrix (docs/MATRIX.md){named}"
        )
    if unread:
        # A report stored before runs were named here has none: the placeholder stays.
        example = next((t.cost_unread_run for t in tiers if t.cost_unread_run), "RUN")
        fixes.append(
            f"the transcript of {plural(unread, 'run')} could not be read (no line of it in its "
            f"format with figures that are numbers), so what it spent is unknown: `scheduler "
            f"show {example}` shows " + ("its" if unread == 1 else "the first one's") + " output"
        )
    if unrecorded:
        example = next((t.cost_unrecorded_run for t in tiers if t.cost_unrecorded_run), "RUN")
        fixes.append(
            f"the transcript of {plural(unrecorded, 'run')} recorded no token usage, so what "
            "its model spent is unknown, not $0: give the agent a transcript format that "
            "carries usage, or write llm_call events with their tokens (docs/MATRIX.md); "
            f"e.g. `scheduler show {example}`"
        )
    return "; ".join(fixes)


def _frontier_and_value(report: ExperimentReport) -> tuple[str, str]:
    """The notes on the cheapest tier per pass and the best value. Without a known
    cost a tier has neither: the note says why (a counted run's model has no price, or
    no run was counted at all), not that it failed. Prices are asked for only where
    a counted run lacks one: an infrastructure error has no cost to price."""
    c = report.cross_tier
    tiers = report.tiers.values()
    priced = [t for t in tiers if t.cost_of_pass is not None]
    unpriced = [tier_id for tier_id, t in report.tiers.items() if t.cost_unknown_runs]
    prices = add_prices(report.tiers[tier_id] for tier_id in unpriced)
    left_out = f" (cost unknown for {', '.join(unpriced)}: {prices})" if unpriced else ""
    if c.frontier_tier is not None:
        frontier = (
            f"frontier cost of pass ${num(c.frontier_cost_of_pass, 4)} ({c.frontier_tier}, "
            f"the cheapest tier per pass){left_out}"
        )
    elif not priced and unpriced:
        frontier = (
            f"costs are unknown, so there is no frontier cost of pass and no best value: {prices}"
        )
    elif not priced:
        frontier = "no run was counted, so there is no frontier cost of pass and no best value"
    else:
        frontier = (
            f"no tier with a known cost passed, so there is no frontier cost of pass{left_out}"
        )
    if c.best_value_tier is not None:
        value = f"best value: {c.best_value_tier} (highest median composite per median $)"
    elif not any(t.cost_usd.median is not None for t in tiers):
        value = ""  # said with the frontier
    else:
        value = "no tier with a known cost scored above 0, so no tier is the best value"
    return frontier, value


def pass_at_k(report: ExperimentReport, scenario: str | None = None) -> Table:
    ks = [
        k for k in PASS_K if any(k in t.analysis.pass_at_k for _, _, t in cells(report, scenario))
    ]
    rows = [
        [
            tier_id,
            scope,
            *(num(t.analysis.pass_at_k.get(k)) for k in ks),
            *(num(t.analysis.pass_hat_k.get(k)) for k in ks),
            ", ".join(t.analysis.flaky_scenarios) or "-",
        ]
        for tier_id, scope, t in cells(report, scenario)
    ]
    return Table(
        "pass@k and pass^k",
        ["tier", "scenario", *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in ks), "flaky"],
        rows,
        [
            "pass@k = 1 - C(n-c,k)/C(n,k): chance at least one of k runs passes; "
            "pass^k = C(c,k)/C(n,k): chance all k pass; a tier averages its scenarios",
            "flaky: scenarios where some runs passed and some failed",
        ],
        label_columns=2,
    )


def seed_metrics(report: ExperimentReport, tier_id: str) -> Table:
    tier = report.tiers[tier_id]
    rows = []
    process: dict[str, str] = {}  # the process metrics shown, each defined under the table
    for scenario, cell in [(ALL, tier), *tier.scenarios.items()]:
        for metric in RUN_METRICS:
            stats: Statistics | None = getattr(cell, metric.name)
            if stats is not None and stats.count:
                rows.append([scenario, metric.label, *_stat_cells(stats)])
        for name, stats in cell.process.items():
            rows.append([scenario, name, *_stat_cells(stats)])
            process.setdefault(name, PROCESS_DEFINITIONS[name])
    cost = per_pass(tier.cost_of_pass)
    cost = cost if cost == "no pass" else f"cost of pass ${cost}"
    return Table(
        f"Seed metrics: {tier_id} (grade {tier.grade or '-'}, {cost})",
        ["scenario", "metric", "median", "mean", "mode", "std_dev", "min", "max", "n"],
        rows,
        [f"{name}: {meaning}" for name, meaning in process.items()],
        label_columns=2,
    )


def _stat_cells(s: Statistics) -> list[str]:
    values = (s.median, s.mean, s.mode, s.std_dev, s.min, s.max)
    cells = [num(v, 4) for v in values]
    if s.count and s.std_dev is None:  # infinite values alone: inf - inf has no value
        cells[3] = NOT_DEFINED
    return [*cells, str(s.count)]


def interaction(report: ExperimentReport, scenario: str | None = None) -> Table:
    rows = [
        [tier_id, scope, *(num(_mean(t.interaction.get(m.name))) for m in INTERACTION_METRICS)]
        for tier_id, scope, t in cells(report, scenario)
    ]
    return Table(
        "Interaction metrics (mean per run)",
        ["tier", "scenario", *(m.label for m in INTERACTION_METRICS)],
        rows,
        label_columns=2,
    )


def rewards(report: ExperimentReport, scenario: str | None = None) -> list[Table]:
    """Each benchmark task verifier's reward per tier and tier x scenario (none without
    a verifier): its mean with an interval, as pass rate has one, and its spread."""
    rows = [
        [
            tier_id,
            scope,
            name,
            f"{num(r.stats.mean)} [{num(r.mean_ci.low)}, {num(r.mean_ci.high)}]"
            if r.mean_ci is not None
            else num(r.stats.mean),
            num(r.stats.median),
            f"{num(r.stats.min)} - {num(r.stats.max)}",
            str(r.stats.count),
        ]
        for tier_id, scope, t in cells(report, scenario)
        for name, r in t.rewards.items()
    ]
    if not rows:
        return []
    return [
        Table(
            "Rewards (benchmark tasks' verifiers)",
            ["tier", "scenario", "reward", "mean [95% CI]", "median", "min - max", "runs"],
            rows,
            [
                "a reward is a number the task's verifier wrote (reward.txt: `reward`; "
                "reward.json: each of its names); a run passes when every one reaches the "
                "scenario's pass_reward; a counted run whose verifier gave none counts 0; "
                "the interval is a percentile bootstrap of the mean"
            ],
            label_columns=3,
        )
    ]


def guidance(report: ExperimentReport, scenario: str) -> Table:
    """One scenario, each tier side by side (llm-tool-test's guidance comparison)."""
    tiers = {tier_id: t.scenarios.get(scenario) for tier_id, t in report.tiers.items()}
    rows = [
        [
            "pass rate (passes/counted)",
            *(num(c.passes / c.counted) if c and c.counted else "-" for c in tiers.values()),
        ],
        *(
            [
                m.label,
                *(num(_mean(c.interaction.get(m.name))) if c else "-" for c in tiers.values()),
            ]
            for m in INTERACTION_METRICS
        ),
        ["runs counted", *(str(c.counted) if c else "0" for c in tiers.values())],
    ]
    return Table(
        f"Guidance comparison: {scenario}",
        ["metric", *tiers],
        rows,
        [
            "means over each tier's runs of this scenario; lower error rate and help-seeking, "
            "higher first-try success mean the guidance works"
        ],
    )


def _mean(stats: Statistics | None) -> float | None:
    return None if stats is None else stats.mean


def context_growth(report: ExperimentReport) -> Table:
    calls = min(
        CONTEXT_CALLS_SHOWN, max((len(t.context_by_call) for t in report.tiers.values()), default=0)
    )
    rows = [
        [
            tier_id,
            num(t.base_context.median, 0),
            num(t.context_growth_avg.median, 1),
            *(
                num(t.context_by_call[i].mean, 0) if i < len(t.context_by_call) else "-"
                for i in range(calls)
            ),
        ]
        for tier_id, t in report.tiers.items()
    ]
    return Table(
        "Context growth per LLM call",
        [
            "tier",
            "base context (median)",
            "growth per call (median)",
            *(f"call {i + 1}" for i in range(calls)),
        ],
        rows,
        ["call i: mean input tokens of the i-th LLM call over the runs that made it"],
    )


def adaptive(report: ExperimentReport) -> list[Table]:
    """How many runs each cell of an adaptive experiment got, why, and by which procedure."""
    if report.adaptive is None:
        return []
    rows = [
        [tier, scenario, str(stop.runs), stop.reason]
        for tier, scenarios in report.adaptive.cells.items()
        for scenario, stop in scenarios.items()
    ]
    return [
        Table(
            "Adaptive runs: where each tier x scenario stopped",
            ["tier", "scenario", "runs", "stopped because"],
            rows,
            [f"procedure: {report.adaptive.procedure}"],
            label_columns=2,
        )
    ]
