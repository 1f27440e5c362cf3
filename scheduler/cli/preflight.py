"""`scheduler preflight`: is the experiment sound? Each tier x scenario once, locally,
against the scripted model server, before anything is queued or spent.

The one place the scheduler runs the worker's code (worker.preflight runs each cell
as a worker runs a run), imported only when a preflight runs: the exception
pyproject.toml's layers contract names."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from core.stats.choices import PLANNING_ICC
from core.wording import plural
from scheduler.cli.context import USAGE_ERROR, err
from scheduler.cli.options import icc_option

if TYPE_CHECKING:
    from scheduler.validation import Checked
    from worker.preflight import CellCheck

COLUMNS = ("tier", "scenario", "cli", "run", "transcript", "gates", "vacuous", "reference",
           "judge key", "agent key", "est. spend")  # fmt: skip


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@click.option(
    "--script",
    "script_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='The model\'s turns, as for `scheduler model-server` (default: "done" at once).',
)
@click.option(
    "--live",
    is_flag=True,
    help="The real providers answer instead (real keys, real spend: one run per cell).",
)
@click.option("--judge", is_flag=True, help="Call each judged run's judge for real.")
@icc_option
def preflight(
    matrix_file: str, script_file: Path | None, live: bool, judge: bool, icc: float
) -> None:
    """Run each tier x scenario once on this machine, the model answered by the
    scripted model server (no cost), and check the scenarios themselves.

    One line per tier x scenario: the preset's CLI found (or found but refusing its
    flags), how its run ended, its transcript recognised, its gates after the
    scripted run, whether the gates pass on an untouched workspace (vacuous),
    whether the scenario's `reference:` solution passes them, the judge's key, the
    agent's key (set, or missing: the check then ran with a placeholder), and the
    cell's estimated spend (this run's cost times its runs); then what the
    experiment can detect, as `scheduler validate` says it. Exit 0 when sound; 2 with
    each problem on a line.

    \b
    Examples:
      scheduler preflight examples/matrix.yaml
      scheduler preflight matrix.yaml --script turns.yaml
    """
    if live and script_file is not None:
        raise click.UsageError("--live and --script exclude each other")
    from scheduler.validation import validate as check

    # An unset judge key is one of the preflight's own lines, not a refusal first.
    checked = check(matrix_file, allow_missing_keys=True)
    if not run_preflight(checked, script_file, live=live, judge=judge, icc=icc):
        sys.exit(USAGE_ERROR)


# wide: keyword-only options, the flags of `preflight` and `submit --preflight`: each
# caller names those it sets
def run_preflight(
    checked: Checked,
    script_file: Path | None,
    *,
    aside: bool = False,
    live: bool = False,
    judge: bool = False,
    judge_key_elsewhere: bool = False,
    icc: float = PLANNING_ICC,
) -> bool:
    """Preflight the checked matrix and print its table (on stderr when `aside`: `submit
    --preflight`, whose stdout is the report's), validate's planning at the assumed
    intra-scenario correlation `icc`, and its problems; whether it is sound."""
    from core.modelserver import ModelScript, ModelServer, load_model_script
    from scheduler.validation import planning
    from worker.preflight import preflight as check_cells

    matrix, bundle = checked.matrix, checked.bundle
    if live:
        cells = check_cells(
            matrix, bundle, None, judge=judge, judge_key_elsewhere=judge_key_elsewhere
        )
    else:
        script = load_model_script(script_file) if script_file is not None else ModelScript()
        with ModelServer(script) as server:
            cells = check_cells(
                matrix, bundle, server, judge=judge, judge_key_elsewhere=judge_key_elsewhere
            )
    click.echo(_table(cells), err=aside)
    spends = [c.spend_usd for c in cells]
    known = sum(s for s in spends if s is not None)
    unknown = sum(s is None for s in spends)
    tokens = "this preflight's" if live else "the scripted"
    click.echo(f"estimated spend of the experiment: ${known:.4f} at {tokens} tokens"
               + (f" ({plural(unknown, 'cell')} with no known price)" if unknown else ""),
               err=aside)  # fmt: skip
    for line in planning(matrix, icc):
        click.echo(line, err=aside)
    problems = _grouped(cells)
    for problem in problems:
        err.print(problem, markup=False, soft_wrap=True, highlight=False)
    if problems:
        err.print(f"{len(problems)} problem(s): the experiment is not sound yet")
    return not problems


def _grouped(cells: list[CellCheck]) -> list[str]:
    """Each problem once, with where it is: a whole tier's (its CLI refuses its flags),
    a whole scenario's (a broken reference, vacuous gates, the judge's key), or the
    cells that have it."""
    where: dict[str, list[CellCheck]] = {}
    for cell in cells:
        for problem in cell.problems:
            # One line each: a CLI's usage message spans several.
            where.setdefault(" ".join(problem.split()), []).append(cell)
    tiers = {c.tier for c in cells}
    scenarios = {c.scenario for c in cells}
    lines = []
    for problem, found in where.items():
        tier, scenario = {c.tier for c in found}, {c.scenario for c in found}
        if len(tier) == 1 and scenario == scenarios and len(tiers) > 1:
            place = f"tier {next(iter(tier))}"
        elif len(scenario) == 1 and tier == tiers:
            place = f"scenario {next(iter(scenario))}"
        else:
            place = ", ".join(f"{c.tier} x {c.scenario}" for c in found)
        lines.append(f"{place}: {problem}")
    return lines


def _table(cells: list[CellCheck]) -> str:
    rows = [COLUMNS] + [
        (c.tier, c.scenario, c.cli, c.run, c.transcript, c.gates, c.vacuous, c.reference,
         c.judge_key, c.agent_key, "?" if c.spend_usd is None else f"${c.spend_usd:.4f}")
        for c in cells
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
