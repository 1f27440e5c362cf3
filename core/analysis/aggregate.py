"""RunResults -> ExperimentReport: statistics per tier and per tier x scenario,
letter grades and the cross-tier comparison. Pure and deterministic: the same
runs in any order give the same report, byte for byte.

Infrastructure errors (`errors`), cancelled runs (`cancelled`) and runs the
budget kept from starting (`not_run`) are counted apart and kept out of every
statistic; timeouts and agent failures are real
results and stay in (README, "Outcomes").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from core.analysis.columns import Group
from core.analysis.comparison import ALPHA, CORRECTION, correct_report
from core.analysis.group import analyse, context_by_call, reward_summaries
from core.analysis.judge_noise import judge_summary
from core.analysis.ordering import ordered_ids
from core.matrix import Budget, Matrix, ModelPrice, Scoring
from core.metrics.catalog import INTERACTION_METRICS, RUN_METRICS, Metric
from core.metrics.formulas import (
    best_value_tier,
    consistency,
    cost_delta,
    cost_of_pass,
    frontier_cost_of_pass,
    letter_grade,
    tier_uplift,
)
from core.metrics.pricing import price_for
from core.results.report import (
    BudgetReport,
    CrossTierResult,
    ExperimentInfo,
    ExperimentReport,
    MetricUplift,
    Statistics,
    TierReport,
)
from core.results.run import (
    ISOLATIONS,
    NO_USAGE,
    UNREAD_TRANSCRIPT,
    ProcessMetrics,
    RunResult,
    RunStatus,
    error_key,
    judge_alone_failed,
)
from core.stats.choices import Correction
from core.stats.descriptive import statistics, variance
from core.wording import plural


@dataclass(frozen=True)
class ReportSettings:
    """How a report is made of an experiment's runs: the `baseline` every tier is
    compared with, the `scoring` of grades, the order of tiers and scenarios (None: the
    experiment's), the correction of the tests against the baseline (`correction` at
    `alpha`), the `budget` the runs were held to and the matrix's `pricing` (which
    models a run of unknown cost lacks a price for). Every version of an experiment's
    report is made with the settings its matrix gives (`of`)."""

    baseline: str
    scoring: Scoring = field(default_factory=Scoring)
    tier_order: Sequence[str] | None = None
    scenario_order: Sequence[str] | None = None
    correction: Correction = CORRECTION
    alpha: float = ALPHA
    budget: Budget | None = None
    pricing: Mapping[str, ModelPrice] = field(default_factory=dict)

    @classmethod
    def of(cls, matrix: Matrix, budget: Budget | None) -> ReportSettings:
        """The settings `matrix` asks for; `budget`, the one its runs were held to (the
        matrix's with the ledger's ceilings: a resume may have raised them)."""
        return cls(
            baseline=matrix.baseline_tier,
            scoring=matrix.scoring,
            tier_order=[t.id for t in matrix.tiers],
            scenario_order=[s.id for s in matrix.scenarios],
            correction=matrix.report.correction,
            alpha=matrix.report.alpha,
            budget=budget,
            pricing=matrix.pricing,
        )


def aggregate(
    info: ExperimentInfo, runs: Sequence[RunResult], settings: ReportSettings
) -> ExperimentReport:
    """The experiment's report. Tiers and scenarios come in the settings' order (default:
    the experiment's), followed by any others the runs name, sorted; listed ones
    without runs still appear, with empty statistics and no grade. Every test against
    the baseline is corrected with the others."""
    baseline, scoring = settings.baseline, settings.scoring
    tier_order, scenario_order = settings.tier_order, settings.scenario_order
    everything = Group.of(runs)
    seen = everything.split("tier")
    cells = {tier: group.split("scenario") for tier, group in seen.items()}
    tiers = ordered_ids(info.tiers if tier_order is None else tier_order, seen)
    scenarios = ordered_ids(
        info.scenarios if scenario_order is None else scenario_order,
        everything.column("scenario"),
    )
    by_tier = {tier: seen.get(tier, Group()) for tier in tiers}
    baseline_cells = cells.get(baseline, {})
    reports: dict[str, TierReport] = {}
    for tier, group in by_tier.items():
        compared = tier != baseline
        reports[tier] = tier_report(
            group,
            scoring,
            settings.pricing,
            scenarios={
                scenario: tier_report(
                    cells.get(tier, {}).get(scenario, Group()),
                    scoring,
                    settings.pricing,
                    baseline=(baseline, baseline_cells.get(scenario, Group()))
                    if compared
                    else None,
                )
                for scenario in scenarios
            },
            baseline=(baseline, by_tier.get(baseline, Group())) if compared else None,
        )
    statuses = Counter(everything.column("status"))
    experiment = info.model_copy(
        update={
            "completed_runs": len(everything),
            "errors": statuses[RunStatus.infra_error],
            "cancelled": statuses[RunStatus.cancelled],
            "not_run": statuses[RunStatus.not_run],
            "passes": sum(everything.counted.column("passed")),
        }
    )
    cross = cross_tier(reports, baseline)
    report = ExperimentReport(
        budget=None if settings.budget is None else budget_report(settings.budget, everything),
        experiment=experiment,
        tiers=reports,
        cross_tier=cross,
        error_reasons=error_reasons(everything),
        judge_errors=sum(
            status.is_infra and judge_alone_failed(reason)
            for status, reason in zip(
                everything.column("status"), everything.column("fail_reason"), strict=True
            )
        ),
        judge=judge_summary(by_tier, reports, cross, scoring),
    )
    return correct_report(report, settings.correction, settings.alpha)


def budget_report(budget: Budget, runs: Group) -> BudgetReport:
    """The spend against each ceiling; the notice leads with the agent's, the judge's beside."""
    agent = sum(c for c in runs.column("cost_usd") if c is not None)
    judge = sum(c for c in runs.column("judge_cost_usd") if c is not None)
    not_run = runs.column("status").count(RunStatus.not_run)
    # A counted run's unknown cost is no $0: said beside the sum that leaves it out.
    unknown = runs.counted.column("cost_usd").count(None)
    spends = [
        f"{what}{_spent_usd(spent, limit)} of {_usd(limit)} spent"
        for what, spent, limit in (
            ("", agent, budget.agent_usd),
            ("judge ", judge, budget.judge_usd),
        )
        if limit is not None
    ]
    state = f"budget reached: {', '.join(spends)}, {plural(not_run, 'run')} not run"
    return BudgetReport(
        agent_usd=budget.agent_usd,
        judge_usd=budget.judge_usd,
        agent_spent_usd=agent,
        judge_spent_usd=judge,
        not_run=not_run,
        notice=(state if not_run else f"budget: {', '.join(spends)}")
        + (f" ({plural(unknown, 'run')} of unknown cost left out)" if unknown else ""),
    )


# Past these many decimals a spend that still reads as its ceiling is taken for it
# (a sum of floats is off in its 15th digit).
_MOST_DECIMALS = 6


def _spent_usd(spent: float, limit: float) -> str:
    """`spent` as _usd writes it, with as many more decimals as it takes not to read as
    `limit` when it is not: $0.5013 of a $0.50 budget, not $0.50 (an overshoot is
    what a reader of the notice looks for), $0.4999 below it."""
    shown = _usd(spent)
    decimals = len(shown.partition(".")[2])
    while shown == _usd(limit, decimals) and decimals < _MOST_DECIMALS:
        decimals += 1
        shown = _usd(spent, decimals)
    return _usd(spent) if shown == _usd(limit, decimals) else shown


def _usd(amount: float, decimals: int | None = None) -> str:
    """Cents from a dollar up, and for a whole number of cents; else four decimals, the
    zeros after the cents left out (two significant digits below a hundredth of a cent),
    so that $0.027 of a $0.03 budget does not read as all of it; `decimals`: as many."""
    if decimals is None:
        decimals = 2
        if 0 < amount < 1 and amount != round(amount, 2):
            fraction = f"{amount:.4f}".rstrip("0").partition(".")[2]
            tiny = not fraction.strip("0")
            decimals = 1 - math.floor(math.log10(amount)) if tiny else max(2, len(fraction))
    return f"${amount:,.{decimals}f}"


def error_reasons(runs: Group) -> dict[str, int]:
    """Infrastructure errors by reason, most common first (ties by reason)."""
    counts = Counter(
        error_key(reason)
        for status, reason in zip(runs.column("status"), runs.column("fail_reason"), strict=True)
        if status.is_infra
    )
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def tier_report(
    runs: Group,
    scoring: Scoring,
    pricing: Mapping[str, ModelPrice],
    scenarios: dict[str, TierReport] | None = None,
    baseline: tuple[str, Group] | None = None,
) -> TierReport:
    """Statistics of one group of runs (a tier, or a tier x scenario); `baseline` is the
    baseline tier's id and its runs of the same scenarios, to test the group against;
    `pricing`, the matrix's prices over the built-in ones."""
    valid = runs.counted
    seed = {m.name: stats for m in RUN_METRICS if (stats := _metric_stats(valid, m)) is not None}
    composite, pass_rate, cost = seed["composite_score"], seed["pass_rate"], seed["cost_usd"]
    statuses = Counter(runs.column("status"))
    reasons = list(zip(valid.column("run_id"), valid.column("cost_unknown_reason"), strict=True))
    unread = [run_id for run_id, why in reasons if why == UNREAD_TRANSCRIPT]
    unrecorded = [run_id for run_id, why in reasons if why and why.startswith(NO_USAGE)]
    return TierReport(
        runs=len(runs),
        errors=statuses[RunStatus.infra_error],
        cancelled=statuses[RunStatus.cancelled],
        not_run=statuses[RunStatus.not_run],
        counted=len(valid),
        tampered=statuses[RunStatus.tampered],
        outages=sum(
            1
            for last, earlier in zip(runs.column("outage"), runs.column("outages"), strict=True)
            if last or earlier
        ),
        isolation=isolation_line(runs.column("isolation")),
        passes=sum(valid.column("passed")),
        grade=None if composite.median is None else letter_grade(composite.median, scoring.grades),
        consistency=None
        if composite.mean is None or composite.std_dev is None
        else consistency(composite.mean, composite.std_dev),
        cost_of_pass=_tier_cost_of_pass(cost, pass_rate),
        cost_unknown_runs=valid.column("cost_usd").count(None),
        cost_unread_runs=len(unread),
        cost_unread_run=unread[0] if unread else None,
        cost_unrecorded_runs=len(unrecorded),
        cost_unrecorded_run=unrecorded[0] if unrecorded else None,
        unpriced_models=unpriced_models(valid, pricing),
        approximate_exit_code_runs=sum(valid.column("interaction.exit_codes_approximate")),
        **seed,
        interaction={m.name: statistics(valid.values(m)) for m in INTERACTION_METRICS},
        process=_process_stats(valid),
        rewards=reward_summaries(runs),
        statuses={status.value: statuses[status] for status in RunStatus if statuses[status]},
        context_by_call=context_by_call(valid),
        analysis=analyse(valid, baseline),
        scenarios=scenarios or {},
    )


def unpriced_models(runs: Group, pricing: Mapping[str, ModelPrice]) -> list[str]:
    """The models without a price that `runs` of unknown cost named, sorted: the run's
    and each of its LLM calls' (a CLI that picks its model for each request, Gemini
    CLI's, names several in one run, and the run is priced by the first)."""
    columns = (runs.column("cost_usd"), runs.column("model"), runs.column("llm_calls"))
    named = {
        model
        for cost, run_model, calls in zip(*columns, strict=True)
        if cost is None
        for model in (run_model, *(call.model for call in calls))
        if model and price_for(model, pricing) is None
    }
    return sorted(named)


def isolation_line(isolations: Sequence[str | None]) -> str | None:
    """How a group's agents were confined, in a line: one isolation's meaning, or each
    isolation with its count when runs differed (workers of different kinds)."""
    counts = Counter(i for i in isolations if i is not None)
    if len(counts) == 1:
        return ISOLATIONS[next(iter(counts))]
    return ", ".join(f"{name} ({plural(n, 'run')})" for name, n in sorted(counts.items())) or None


def cross_tier(reports: dict[str, TierReport], baseline: str) -> CrossTierResult:
    """Uplift of each tier's median composite over the baseline's, and the spread of
    pass rate and cost medians across tiers (tiers without valid runs left out)."""
    composites = {tier: r.composite_score.median for tier, r in reports.items()}
    base = composites.get(baseline)
    notes = []
    if base is None:
        notes.append(f"baseline tier {baseline!r} has no valid runs, so uplift is undefined")
    elif base == 0:
        notes.append(
            f"baseline tier {baseline!r} has a median composite score of 0; "
            "uplift relative to 0 is undefined"
        )
    uplift: dict[str, float | None] = {}
    for tier, score in composites.items():
        if tier == baseline:
            continue
        uplift[tier] = None if base is None or score is None else tier_uplift(score, base)
    empty = [tier for tier, score in composites.items() if score is None and tier != baseline]
    if empty and base is not None:
        notes.append(f"tiers without valid runs have no uplift: {', '.join(empty)}")
    pass_medians = _medians(r.pass_rate for r in reports.values())
    impl_medians = _medians(r.impl_rate for r in reports.values())
    cost_medians = _medians(r.cost_usd for r in reports.values())
    frontier = frontier_cost_of_pass(
        {t: r.cost_of_pass for t, r in reports.items() if r.cost_of_pass is not None}
    )
    return CrossTierResult(
        baseline=baseline,
        tier_uplift=uplift,
        uplift_note="; ".join(notes) or None,
        uplift={
            tier: _metric_uplift(report, reports[baseline], uplift[tier])
            for tier, report in reports.items()
            if tier != baseline and baseline in reports
        },
        pass_rate_variance=variance(pass_medians) if pass_medians else None,
        impl_rate_variance=variance(impl_medians) if impl_medians else None,
        cost_variance=variance(cost_medians) if cost_medians else None,
        cost_delta=cost_delta(cost_medians) if cost_medians else None,
        frontier_cost_of_pass=None if frontier is None else frontier[0],
        frontier_tier=None if frontier is None else frontier[1],
        best_value_tier=best_value_tier(
            {
                t: (r.composite_score.median, r.cost_usd.median)
                for t, r in reports.items()
                if r.composite_score.median is not None and r.cost_usd.median is not None
            }
        ),
    )


def _metric_uplift(tier: TierReport, base: TierReport, composite: float | None) -> MetricUplift:
    """Per-metric relative change against the baseline: the pass rate is passes / counted
    (a median of 0/1 outcomes says little), impl rate and cost their medians."""

    def change(value: float | None, reference: float | None) -> float | None:
        if value is None or reference is None:
            return None
        return tier_uplift(value, reference)

    return MetricUplift(
        pass_rate=change(_share(tier), _share(base)),
        impl_rate=change(tier.impl_rate.median, base.impl_rate.median),
        composite=composite,
        cost_change=change(tier.cost_usd.median, base.cost_usd.median),
    )


def _share(report: TierReport) -> float | None:
    return report.passes / report.counted if report.counted else None


def _metric_stats(runs: Group, metric: Metric) -> Statistics | None:
    """None for an optional metric no run has; else its Statistics, empty or not."""
    values = runs.values(metric)
    if metric.optional and not values:
        return None
    return statistics(values)


def _tier_cost_of_pass(cost: Statistics, pass_rate: Statistics) -> float | None:
    """mean(cost_usd) / mean(pass_rate). The cost mean is over the runs whose cost is
    known, the pass rate over all valid runs: it is known for every one of them."""
    if cost.mean is None or pass_rate.mean is None:
        return None
    return cost_of_pass(cost.mean, pass_rate.mean)


def _process_stats(runs: Group) -> dict[str, Statistics]:
    """Statistics of each process metric some run has."""
    result = {}
    measured = [p for p in runs.column("process") if p is not None]
    for name in ProcessMetrics.model_fields if measured else ():
        values = [value for p in measured if (value := getattr(p, name)) is not None]
        if values:
            result[name] = statistics(values)
    return result


def _medians(groups: Iterable[Statistics]) -> list[float]:
    return [s.median for s in groups if s.median is not None]
