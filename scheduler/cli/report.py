"""`scheduler report`: an experiment's report, any version, in any format."""

from __future__ import annotations

import click

from core.errors import InputError
from scheduler.cli.context import CLIContext, err, exit_if_infra_errors, pass_cli
from scheduler.cli.options import (
    broker_option,
    correction_option,
    format_option,
    json_option,
    nonfinite_option,
    wait_option,
)
from scheduler.report.formats import SCENARIO_FORMATS


# long: 32 of them are the docstring, which click shows as the command's --help.
# wide: click passes each of the command's options as a parameter
@click.command()
@click.argument("experiment", required=False)
@broker_option
@format_option()
@json_option("The same as --format json.")
@click.option(
    "--runs",
    is_flag=True,
    help="Every run: json puts each RunResult under `runs`, csv gives one row per run "
    "instead of the tier rows (html always has its run table).",
)
@correction_option(None, "Default: as the experiment's report was made (matrix `report:`).")
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Significance level of the family of tests (default: as the report was made).",
)
@click.option(
    "--scenario",
    metavar="ID",
    default=None,
    help="Table, markdown, html: the view of one scenario, its tiers' interaction metrics "
    "side by side (the guidance comparison).",
)
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="The report version: 1 is the runs' own, 2, 3... each rejudge's or rescore's "
    "(default: the latest; `scheduler list` shows them).",
)
@wait_option(
    "With a shared broker: an experiment still running is followed (a progress bar on "
    "stderr) until its report is ready, then printed."
)
@click.option(
    "--fail-on-infra-errors",
    is_flag=True,
    help="Exit 3, after the report, when some runs were infrastructure errors (a CI gate: "
    "the agent was never measured).",
)
@nonfinite_option
@pass_cli
def report(
    cli: CLIContext,
    experiment: str | None,
    runs: bool,
    correction: str | None,
    alpha: float | None,
    scenario: str | None,
    version: int | None,
    fail_on_infra_errors: bool,
) -> None:
    """Print an experiment's report (default: the latest experiment, its latest version).

    The table is one screen: each tier's verdict against the baseline, pass
    rate and cost of pass, the most common failure reasons with a run to
    `scheduler show` for each; --full gives every section. It fits the
    terminal (COLUMNS when set, else 120 columns when stdout is not a terminal).
    Pass rate is passes / runs counted (completed,
    agent_error, timeout, limit) with its Wilson 95% interval; infrastructure errors
    and cancelled runs are counted apart. Every test against the baseline is
    corrected with the others (Holm unless the matrix's `report:` or
    --correction says otherwise); raw and adjusted p-values are both shown.
    --format github is compact markdown for a PR comment or a job summary,
    its verdict line first.

    The html format is one file that opens offline: a table of contents, the
    most common failure reasons (a click shows their runs), charts, tables and
    a run table that filters by tier, scenario, outcome and failure reason;
    click a run for its evidence (gates, judge, transcript, stderr and stdout,
    attempts).

    \b
    Examples:
      scheduler report EXP --full                 # every section, in the terminal
      scheduler report EXP --fail-on-infra-errors # exit 3 if runs never measured the agent
      scheduler report EXP --format markdown > report.md
      scheduler report EXP --format github >> "$GITHUB_STEP_SUMMARY"
      scheduler report EXP --correction bh --alpha 0.1
      scheduler report EXP --format html > report.html
      scheduler report EXP --scenario create_notes
      scheduler report EXP --format json --runs --json-nonfinite null | jq .tiers
      scheduler report EXP --format csv --runs > runs.csv   # one row per run
      scheduler report EXP --version 1      # the original, before any rejudge
      scheduler report EXP --wait           # a fleet still running it: when it is done
    """
    fmt = cli.fmt
    if scenario is not None and fmt not in SCENARIO_FORMATS:
        raise InputError(
            f"--scenario is a view for --format {', '.join(SCENARIO_FORMATS)}; {fmt} carries "
            "every scenario already"
        )
    if runs and fmt not in ("json", "csv", "html"):
        raise InputError(
            f"--runs lists every run in --format json or csv, not {fmt} (html always has its "
            "run table; `scheduler show RUN` gives one run's evidence)"
        )
    from scheduler.report.render import render

    fleet = cli.fleet()
    exp_id = fleet.experiment_id(experiment)
    if cli.wait and fleet.shared and fleet.current_version(exp_id) is None:
        fleet.wait(exp_id)  # none of the runs as they are now (a resume's drops the old)
    result = fleet.report(
        exp_id,
        version=version,
        runs=runs or cli.reads_runs,
        correction=correction,
        alpha=alpha,
    )
    evidence = fleet.evidence_blobs(exp_id) if fmt == "html" else None
    latest = fleet.report_versions(exp_id)[-1]  # there is one: the report was found
    if version is None and result.version != latest:  # the later ones a resume superseded
        err.print(
            f"report version {result.version} of {latest}: "
            + ("version 2 was" if latest == 2 else f"versions 2-{latest} were")
            + " made of the runs before a resume ran some again (--version N shows one; "
            f"`scheduler rejudge {exp_id}` judges the runs as they are now)",
            markup=False,
            soft_wrap=True,
        )
    elif latest > 1:
        note = f" ({result.version_note})" if result.version_note else ""
        err.print(
            f"report version {version or latest} of {latest}{note}; --version N for another",
            markup=False,
            soft_wrap=True,
        )
    known = list(dict.fromkeys(s for t in result.tiers.values() for s in t.scenarios))
    if scenario is not None and scenario not in known:
        from core.matrix import did_you_mean

        hint = did_you_mean(scenario, known)
        raise InputError(
            f"experiment {exp_id} has no scenario {scenario!r}; its scenarios: {', '.join(known)}"
            + (f"; {hint}" if hint else "")
        )
    rendered = render(
        result,
        fmt,
        scenario,
        nonfinite=cli.nonfinite,
        evidence=evidence,
        full=cli.full,
        complete=cli.hinted,
        # `scheduler show` shows a run's result in the default version: any other
        # version's hints name theirs.
        show_version=None if result.version == fleet.current_version(exp_id) else result.version,
    )
    cli.print_report(rendered, result)
    if fail_on_infra_errors:
        exit_if_infra_errors(result)
