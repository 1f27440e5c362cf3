"""The judge's own noise: its table beside the runs' spread, and the notes on tiers whose
result against the baseline the noise alone could explain."""

from __future__ import annotations

from core.results.report import ExperimentReport, Verdict
from core.wording import plural
from scheduler.report.formatting import Table, num, pct, signed


def within_noise_notes(report: ExperimentReport) -> list[str]:
    """One note per tier whose result against the baseline lies within the judge's noise."""
    notes = []
    for flag in report.judge.within_noise if report.judge is not None else []:
        uplift = "" if flag.uplift is None else f"uplift {pct(flag.uplift)}, "
        note = (
            f"{flag.tier}: {uplift}Δ median composite {signed(flag.difference)}, lies within the "
            f"judge's noise (less than 2 judge SDs of the difference, {num(flag.band, 4)})"
        )
        if flag.verdict in (Verdict.better, Verdict.worse, Verdict.mixed):
            note += f"; its verdict ({flag.verdict.value}) could be the judge's noise alone"
        notes.append(note)
    return notes


def judge_noise(report: ExperimentReport) -> Table | None:
    """The judge's own noise beside the runs' spread, per tier (core.analysis.judge_noise);
    None when no run was judged."""
    summary = report.judge
    if summary is None:
        return None
    rows = [
        [
            tier_id,
            str(t.judged_runs),
            str(t.repeats),
            num(t.judge_variance, 4),
            num(t.judge_sd_of_mean, 4),
            num(t.run_variance, 4),
            num(t.judge_share),
        ]
        for tier_id, t in summary.tiers.items()
    ]
    notes = [
        f"{plural(summary.judgments, 'judgment')}, {summary.cached} from cache",
        "judge variance: mean over runs of the sample variance of their K judgments; judge SD "
        "of a run's score: sqrt(judge variance / K); run-to-run variance: sample variance of "
        "the runs' scores (each the mean of its K); judge share: (judge variance / K) / "
        "run-to-run variance",
    ]
    if all(t.judge_variance is None for t in summary.tiers.values()):
        notes.append("one judgment per run: set `judge: {repeats: 3}` to measure the noise")
    above = [tier_id for tier_id, t in summary.tiers.items() if (t.judge_share or 0) > 1]
    if above:
        # Not a share any more: say what can make the runs vary less than the judge alone.
        notes.append(
            f"judge share above 1 ({', '.join(above)}): the runs' scores vary less than the "
            "judge alone would make them, by chance with few runs, or because runs with the "
            "same transcript get the same judgments from the judgment cache"
        )
    notes += within_noise_notes(report)
    return Table(
        "Judge noise",
        [
            "tier",
            "judged runs",
            "judgments per run (K)",
            "judge variance",
            "judge SD of a run's score",
            "run-to-run variance",
            "judge share",
        ],
        rows,
        notes,
    )
