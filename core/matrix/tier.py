"""`tiers:`: the configurations under comparison, each the matrix's agent with overrides."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from core.matrix.agent import AgentOverride
from core.matrix.fields import FilePath, Identifier, Strict
from core.matrix.spend import Limits


class Tier(Strict):
    id: Identifier
    description: str = ""
    files: dict[str, FilePath] = Field(
        default_factory=dict, description="workspace path -> source file, copied into each run"
    )
    agent: AgentOverride | None = None  # type: ignore[valid-type]
    queue: str | None = None
    limits: Limits | None = Field(None, description="what each run may spend")

    @field_validator("files")
    @classmethod
    def _inside_workspace(cls, files: dict[str, Path]) -> dict[str, Path]:
        for dest in files:
            parts = Path(dest).parts
            if Path(dest).is_absolute() or ".." in parts or not parts:
                raise ValueError(
                    f"file destination {dest!r} must be a relative path inside the workspace"
                )
        return files
