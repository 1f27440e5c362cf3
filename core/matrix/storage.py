"""What of an experiment is shipped to the workers and kept of its runs: `bundle:`,
`evidence:`, `artifacts:` and `workspace_archive:`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from core.matrix.fields import Strict, resolve

# Version control and tools' caches: not what a run needs. Environment files: secrets
# of the submitting machine, which would reach the broker and every worker's agents.
DEFAULT_EXCLUDE = (
    ".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".env", ".env.*",
)  # fmt: skip


class BundleConfig(Strict):
    """What `scheduler submit` ships to the workers with the experiment (core.files.bundle):
    the matrix folder and every path the matrix names."""

    max_mb: float = Field(
        64.0, gt=0, le=4096, allow_inf_nan=False, description="all files together, in MB"
    )
    max_file_mb: float = Field(
        16.0, gt=0, le=512, allow_inf_nan=False, description="the largest one file, in MB"
    )
    max_files: int = Field(10_000, ge=1, le=1_000_000, description="files, folders and links")
    exclude: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EXCLUDE),
        description="glob patterns of file and folder names in the matrix folder not to ship "
        "(a list replaces the default; a path the matrix names is shipped whole regardless)",
    )


class EvidenceLimits(Strict):
    """How much of a run's evidence is kept (README, "Evidence"); what a cap leaves
    out is said in the evidence (RunEvidence.cuts)."""

    max_item_kb: float = Field(
        64,
        gt=0,
        allow_inf_nan=False,
        description="one text (stdout, stderr, transcript, a gate's output, the patch): "
        "its head and tail are kept",
    )
    max_run_kb: float = Field(
        256,
        gt=0,
        allow_inf_nan=False,
        description="all texts of one run together, before compression",
    )
    max_experiment_mb: float = Field(
        256,
        gt=0,
        allow_inf_nan=False,
        description="all runs' stored (compressed) evidence; later runs keep a minimal record",
    )


class Artifacts(Strict):
    """A folder every worker and the scheduler share: evidence goes there as files
    (Redis keeps a pointer), for evidence bigger than Redis should hold."""

    dir: Annotated[Path, AfterValidator(resolve)]


class WorkspaceArchive(Strict):
    """Runs' workspaces kept in Redis after the run (bounded), for `scheduler rescore`."""

    keep: Literal["failed", "all"] = Field(
        "failed", description="the workspaces of failed runs only, or of every run"
    )
    max_bytes: int = Field(
        2_000_000,
        ge=1024,
        le=50_000_000,
        description="a compressed workspace above this is not kept (rescore keeps that run "
        "as it was, and says how many)",
    )
