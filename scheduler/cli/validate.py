"""`scheduler validate` and `scheduler schema`: a matrix checked, and every key it accepts."""

from __future__ import annotations

import json

import click

from core.matrix import matrix_json_schema
from scheduler.cli.context import print_warnings, size
from scheduler.cli.options import allow_missing_keys_option, icc_option
from scheduler.validation import missing_clis, planning, summary
from scheduler.validation import validate as check


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@allow_missing_keys_option
@icc_option
def validate(matrix_file: str, allow_missing_keys: bool, icc: float) -> None:
    """Check a matrix file, summarize the plan and say what differences it can detect
    (exit 2 on any problem).

    Example: scheduler validate examples/matrix.yaml --icc 0.4
    """
    checked = check(matrix_file, allow_missing_keys=allow_missing_keys)
    matrix, bundle = checked.matrix, checked.bundle
    click.echo(summary(matrix))
    for line in planning(matrix, icc):
        click.echo(line)
    click.echo(
        f"files shipped to workers: {len(bundle.manifest.digests())} distinct files, "
        f"{size(bundle.size)} (bundle.max_mb: {matrix.bundle.max_mb:g})"
    )
    print_warnings(checked.warnings)
    for cli, tiers in missing_clis(matrix).items():
        click.echo(
            f"warning: agent CLI {cli!r} (tiers {', '.join(tiers)}) is not on this machine's "
            "PATH; the workers that run them need it",
            err=True,
        )


@click.command()
def schema() -> None:
    """Print the JSON Schema of matrix.yaml (for editor completion).

    Example: scheduler schema > matrix.schema.json
    """
    click.echo(json.dumps(matrix_json_schema(), indent=2))
