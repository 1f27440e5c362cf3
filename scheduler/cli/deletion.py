"""`scheduler delete` and `prune`: experiments removed with everything stored with them."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import click

from core.errors import InputError
from core.wording import plural
from scheduler.cli.context import CLIContext, err, pass_cli, size
from scheduler.cli.options import broker_option

if TYPE_CHECKING:
    from core.store.retention import Deleted

yes_option = click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
force_option = click.option(
    "--force",
    is_flag=True,
    help="Delete running experiments too (their queued runs are dropped by the workers; a "
    "run in progress may write its result back: delete again once it ends).",
)


@click.command()
@click.argument("experiment")
@broker_option
@yes_option
@force_option
@pass_cli
def delete(cli: CLIContext, experiment: str, yes: bool, force: bool) -> None:
    """Delete an experiment and everything stored with it: runs, evidence (its files in
    an artifacts folder too), reports, files, counters, and the Celery keys of its chords.

    \b
    Examples:
      scheduler delete notes-guidance-20261122-101500-ab12
      scheduler delete notes-guidance-20261122-101500-ab12 --yes     # in a script
    """
    fleet = cli.fleet()
    doomed = fleet.deletable(experiment, force=force)
    _confirm(
        f"delete experiment {experiment} ({plural(doomed.keys, 'key')}, "
        f"{size(doomed.stored_bytes)})?",
        yes,
    )
    _deleted(experiment, fleet.delete(experiment, force=force), doomed.stored_bytes)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _seconds(ctx: click.Context, param: click.Parameter, age: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", age or "")
    if match is None:
        raise click.BadParameter(f"{age!r} is not an age: a number and a unit, s m h d or w (30d)")
    return float(match[1]) * _UNITS[match[2]]


@click.command()
@click.option(
    "--older-than",
    "age",
    required=True,
    metavar="AGE",
    callback=_seconds,
    help="Created longer ago than this: a number and a unit, s m h d or w (30d, 12h).",
)
@broker_option
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@yes_option
@force_option
@pass_cli
def prune(cli: CLIContext, age: float, dry_run: bool, yes: bool, force: bool) -> None:
    """Delete every experiment created longer ago than --older-than, with all its keys
    (as `scheduler delete`); running ones are kept unless --force.

    \b
    Examples:
      scheduler prune --older-than 30d --dry-run
      scheduler prune --older-than 30d --yes      # e.g. a nightly job
    """
    fleet = cli.fleet()
    found = fleet.expired(age, force=force)
    for exp_id, running in found.kept.items():
        err.print(f"keeping {exp_id}: it is {running} (--force deletes it)")
    for exp_id, stored in found.doomed.items():
        click.echo(f"{'would delete' if dry_run else 'delete'} {exp_id}  {size(stored)}")
    total = size(sum(found.doomed.values()))
    if not found.doomed or dry_run:
        note = " (dry run: nothing deleted)" if dry_run else ""
        click.echo(f"{plural(len(found.doomed), 'experiment')}, {total}{note}")
        return
    these = (
        "this experiment" if len(found.doomed) == 1 else f"these {len(found.doomed)} experiments"
    )
    _confirm(f"delete {these} ({total})?", yes)
    for exp_id, stored in found.doomed.items():  # running ones are among them only with --force
        _deleted(exp_id, fleet.delete(exp_id, force=True), stored)
    click.echo(f"deleted {plural(len(found.doomed), 'experiment')}, {total}")


def _deleted(exp_id: str, deleted: Deleted, stored: int) -> None:
    files = f", {plural(deleted.files, 'evidence file')}" if deleted.files else ""
    click.echo(f"deleted {exp_id}: {plural(deleted.keys, 'key')}, {size(stored)}{files}")
    if deleted.unreachable:
        err.print(
            f"{plural(len(deleted.unreachable), 'evidence file')} of {exp_id} could not be "
            f"removed from here, e.g. {deleted.unreachable[0]}: remove "
            f"{'it' if len(deleted.unreachable) == 1 else 'them'} where the artifacts folder is",
            soft_wrap=True,
            markup=False,
        )


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError(f"{question[:-1]}: pass --yes to confirm without a terminal")
    click.confirm(question, abort=True, err=True)
