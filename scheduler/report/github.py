"""`--format github`: compact markdown for a pull-request comment or a GitHub job summary.

The verdict line comes first (what a reviewer reads in a notification), then
one row per tier; the per-scenario rows fold away under <details>. Figures
and wording come from the modules the other formats use (scheduler.report.formatting,
.verdicts, .noise), so they say what every other format says.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.results.report import (
    Comparison,
    ExperimentComparison,
    ExperimentReport,
    Multiplicity,
    Verdict,
)
from scheduler.report import compare, formatting, noise, sections, verdicts
from scheduler.report import scenarios as scenarios_section
from scheduler.report.formatting import ALL, Table
from scheduler.report.markdown import md, table_lines

# Scenario rows shown under <details>; a PR comment holds 65,536 characters at most.
MAX_SCENARIO_ROWS = 60

_MARKS = {"regression": "❌", "improvement": "✅", "mixed": "⚠️", "none": "⚪"}

TEST_COLUMNS = [
    "Δ pass rate [95% CI]",
    "Fisher p (raw / adj.)",
    "Cliff's δ composite [95% CI]",
    "Mann-Whitney p (raw / adj.)",
    "verdict",
]


def github_report(report: ExperimentReport) -> str:
    baseline = report.cross_tier.baseline
    against = {
        tier_id: t.analysis.vs_baseline
        for tier_id, t in report.tiers.items()
        if t.analysis.vs_baseline is not None
    }
    verdict = (
        _verdict_line(report, against)
        if against
        else f"**{_MARKS['none']} {md(baseline)} is the only tier: no test against a baseline**"
    )
    lines = [
        verdict,
        "",
        # Right under the verdict: what the budget left out qualifies it.
        *(f"> **{md(line)}**\n" for line in sections.banner(report)),
        md(sections.header(report)),
    ]
    tiers = Table(
        "tiers",
        ["tier", formatting.PASS_RATE, "grade", "cost of pass $", *TEST_COLUMNS],
        [
            [
                tier_id,
                formatting.pass_rate(t.passes, t.counted),
                t.grade or "-",
                formatting.per_pass(t.cost_of_pass),
                *(["baseline"] + [""] * (len(TEST_COLUMNS) - 1) if vs is None else _test(vs)),
            ]
            for tier_id, t in report.tiers.items()
            for vs in [t.analysis.vs_baseline]
        ],
    )
    scenario_rows = [
        [tier_id, scope, formatting.pass_rate(t.passes, t.counted), *_test(vs)]
        for tier_id, scope, t in formatting.cells(report)
        # A lone scenario's row is its tier's: shown once, above.
        if scope != ALL
        and len(report.tiers[tier_id].scenarios) > 1
        and (vs := t.analysis.vs_baseline) is not None
    ]
    scenarios = Table(
        "per scenario", ["tier", "scenario", formatting.PASS_RATE, *TEST_COLUMNS], scenario_rows
    )
    across = scenarios_section.compact_table(report)
    c = report.cross_tier
    against_all = {t: r.analysis.vs_baseline for t, r in report.tiers.items()}
    notes = [
        verdicts.UNADJUSTED_INTERVALS,
        verdicts.multiplicity_note(
            report.multiplicity,
            report.multiplicity_across_scenarios,
            verdicts.stratified_tiers(against_all),
        ),
        verdicts.detectable_note(report.multiplicity),
        *verdicts.stratified_note(against_all),
        # A verdict above that the judge's noise alone could explain: the PR reader's caveat.
        *noise.within_noise_notes(report),
    ]
    if c.frontier_tier is not None:
        notes.append(
            f"frontier cost of pass ${formatting.num(c.frontier_cost_of_pass, 4)} "
            f"({c.frontier_tier})"
        )
    if c.best_value_tier is not None:
        notes.append(f"best value: {c.best_value_tier} (median composite per median $)")
    return _document(
        lines, tiers, scenarios, notes, report.experiment.id, "report", _section(across)
    )


def _section(table: Table | None) -> list[str]:
    """The section across scenarios, right after the tier rows it qualifies."""
    if table is None:
        return []
    return [
        "",
        f"**{md(table.title)}**",
        "",
        *table_lines(table),
        "",
        *(f"- {md(note)}" for note in table.notes),
    ]


def _verdict_line(report: ExperimentReport, against: dict[str, Comparison]) -> str:
    """Each tier's verdict, and the tests and correction it came from."""
    pooled = any(c.verdict_from is None for c in against.values())
    said = ", ".join(
        f"{tier} {c.verdict.value}"
        + ("" if c.verdict_from is None or not pooled else f" ({c.verdict_from})")
        for tier, c in against.items()
    )
    families = _families(against, report.multiplicity, report.multiplicity_across_scenarios)
    return (
        f"**{_mark(against.values())} Against baseline {md(report.cross_tier.baseline)}: "
        f"{md(said)}** ({md(families)})"
    )


def _families(
    against: dict[str, Comparison], run_level: Multiplicity | None, stratified: Multiplicity | None
) -> str:
    """The family the verdicts came from: the run-level one, the stratified one when every
    tier has two or more scenarios (named with its tests), or both."""
    basis = {c.verdict_from for c in against.values()}
    if basis == {None}:
        return _corrected(run_level, verdicts.RUN_LEVEL)
    if None in basis:
        return (
            f"{_corrected(run_level, verdicts.RUN_LEVEL)}; "
            f"{_corrected(stratified, verdicts.ACROSS_SCENARIOS)}"
        )
    return "; ".join(
        [*sorted(str(b) for b in basis), _corrected(stratified, verdicts.ACROSS_SCENARIOS)]
    )


def github_comparison(result: ExperimentComparison) -> str:
    a, b = result.reference, result.experiment
    if result.regressions:
        head = f"❌ Regression: {', '.join(result.regressions)} significantly worse in {b.id}"
    else:
        head = f"✅ No regression: no tier significantly worse in {b.id}"
    families = _families(result.tiers, result.multiplicity, result.multiplicity_across_scenarios)
    lines = [
        f"**{md(head)} than in {md(a.id)}** ({md(families)})",
        *_unseen_falls(result),
        "",
        md(compare.comparison_title(result)),
    ]
    columns = ["tier", f"A {formatting.PASS_RATE}", f"B {formatting.PASS_RATE}", *TEST_COLUMNS]

    def row(label: list[str], c: Comparison) -> list[str]:
        return [
            *label,
            formatting.pass_rate(c.reference_passes, c.reference_runs),
            formatting.pass_rate(c.passes, c.runs),
            *_test(c),
        ]

    tiers = Table("tiers", columns, [row([t], c) for t, c in result.tiers.items()])
    scenarios = Table(
        "per scenario",
        ["tier", "scenario", *columns[1:]],
        [
            row([t, s], c)
            for t, cells in result.scenarios.items()
            for s, c in cells.items()
            if len(cells) > 1
        ],
    )
    notes = [
        f"A = {a.id}, B = {b.id}; deltas are B - A",
        verdicts.UNADJUSTED_INTERVALS,
        verdicts.multiplicity_note(
            result.multiplicity,
            result.multiplicity_across_scenarios,
            verdicts.stratified_tiers(result.tiers),
        ),
        verdicts.detectable_note(result.multiplicity),
        *verdicts.stratified_note(result.tiers),
    ]
    notes += verdicts.unmatched_notes(result)
    across = scenarios_section.comparison_questions_table(result)
    return _document(lines, tiers, scenarios, notes, f"{a.id} {b.id}", "compare", _section(across))


def _unseen_falls(result: ExperimentComparison) -> list[str]:
    """Tiers whose pass rate fell by more than these runs could detect: "no regression"
    must not read as "no fall" when the test could not have seen it."""
    unseen = [
        f"{tier} {formatting.pass_rate(c.reference_passes, c.reference_runs)} -> "
        f"{formatting.pass_rate(c.passes, c.runs)}"
        for tier, c in result.tiers.items()
        if c.pass_rate_delta is not None
        and c.pass_rate_delta < 0
        and c.detectable is not None
        and (c.detectable.regression is None or -c.pass_rate_delta < c.detectable.regression)
        and tier not in result.regressions
    ]
    if not unseen:
        return []
    return ["", md("⚠️ fell by less than these runs can detect: " + "; ".join(unseen))]


def _mark(comparisons: Iterable[Comparison]) -> str:
    seen = {c.verdict for c in comparisons}
    if Verdict.mixed in seen or {Verdict.better, Verdict.worse} <= seen:
        return _MARKS["mixed"]
    if Verdict.worse in seen:
        return _MARKS["regression"]
    if Verdict.better in seen:
        return _MARKS["improvement"]
    return _MARKS["none"]


def _corrected(m: Multiplicity | None, family: str) -> str:
    if m is None:
        return "not corrected for multiple comparisons"
    if m.correction == "none":
        return f"{verdicts.corrected_across(m, family)}, alpha {m.alpha:g} each"
    return f"{verdicts.corrected_across(m, family)}, alpha {m.alpha:g}"


def _test(c: Comparison) -> list[str]:
    return [
        formatting.signed_interval(c.pass_rate_delta, c.risk_difference_ci),
        f"{formatting.p_value(c.fisher_p)} / {formatting.p_value(c.fisher_p_adjusted)}",
        formatting.signed_interval(c.cliffs_delta, c.cliffs_delta_ci),
        f"{formatting.p_value(c.mann_whitney_p)} / {formatting.p_value(c.mann_whitney_p_adjusted)}",
        verdicts.verdict(c),
    ]


# wide: the parts of a document its two callers (report, compare) build apart
def _document(
    lines: list[str],
    tiers: Table,
    scenarios: Table,
    notes: list[str],
    ids: str,
    command: str,
    after: list[str] | None = None,
) -> str:
    lines += ["", *table_lines(tiers), *(after or [])]
    if scenarios.rows:
        shown = scenarios.rows[:MAX_SCENARIO_ROWS]
        lines += [
            "",
            f"<details><summary>Per scenario ({len(scenarios.rows)} rows of tier x "
            "scenario)</summary>",
            "",
            *table_lines(Table(scenarios.title, scenarios.columns, shown)),
        ]
        if len(scenarios.rows) > len(shown):
            lines.append(
                f"\nand {len(scenarios.rows) - len(shown)} more rows: "
                f"`scheduler {command} {ids} --format markdown`"
            )
        lines += ["", "</details>"]
    lines += ["", *(f"- {md(note)}" for note in notes)]
    return "\n".join(lines) + "\n"
