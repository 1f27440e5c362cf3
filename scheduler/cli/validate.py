"""`scheduler validate` and `scheduler schema`: a matrix checked, and every key it accepts."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from pathlib import Path

import click

from scheduler.cli.context import print_warnings, size
from scheduler.cli.options import allow_missing_keys_option, icc_option

# core's folder, found without importing it (core/__init__.py imports nothing, but a
# spec is all that is needed).
CORE = Path(__file__).resolve().parents[2] / "core"


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@allow_missing_keys_option
@icc_option
def validate(matrix_file: str, allow_missing_keys: bool, icc: float) -> None:
    """Check a matrix file, summarize the plan and say what differences it can detect
    (exit 2 on any problem).

    Example: scheduler validate examples/matrix.yaml --icc 0.4
    """
    from scheduler.validation import missing_clis, planning, summary
    from scheduler.validation import validate as check

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
    click.echo(schema_text())


def schema_text() -> str:
    """The matrix's JSON Schema, as pydantic makes it from the models (0.2-0.3 s of
    imports and building), or as it made it before for the same code: kept in the
    user's cache folder under a digest of every source file of `core` and of the
    installed pydantic, so that a changed model, or another pydantic, makes it anew."""
    cached = _cache_folder() / f"matrix-schema-{code_digest()}.json"
    with contextlib.suppress(OSError):
        return cached.read_text(encoding="utf-8")
    from core.matrix import matrix_json_schema

    text = json.dumps(matrix_json_schema(), indent=2)
    with contextlib.suppress(OSError):  # a read-only home: made anew each time
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(cached)  # whole or not at all, for a schema printed meanwhile
    return text


def code_digest(root: Path = CORE) -> str:
    """What the schema depends on: the source of `root`'s modules (the matrix's models
    and what they import) and the version of pydantic, which makes it."""
    pydantic = importlib.util.find_spec("pydantic")  # found, not imported
    assert pydantic is not None and pydantic.origin is not None
    digest = hashlib.sha256(Path(pydantic.origin).with_name("version.py").read_bytes())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def _cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalfleet"
