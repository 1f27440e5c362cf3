"""`agent:`: how one run's agent is started, and the container it may run in."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from core.matrix.fields import FilePath, HttpUrl, Strict
from core.matrix.presets import (
    PRESETS,
    AgentPreset,
    PresetName,
    TranscriptFormatName,
    preset_fields,
)


def _not_a_worker_setting(name: str) -> str:
    # The worker's own settings, the broker URL among them, are kept from every agent.
    if name.startswith("EVALFLEET_"):
        raise ValueError(f"{name}: EVALFLEET_* are the worker's settings, never an agent's")
    return name


VariableName = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), AfterValidator(_not_a_worker_setting)
]


class DockerSandbox(Strict):
    """`sandbox: docker`: the container a command agent (and by default its command
    gates) runs in, one per run (worker.docker_sandbox)."""

    image: str | None = Field(
        None, description="image the agent runs in; it needs bash (built or pulled beforehand)"
    )
    build: FilePath | None = Field(
        None,
        description="a Dockerfile (its folder is the build context) each worker builds before "
        "its first run; instead of `image`",
    )
    network: Literal["none", "bridge"] = Field(
        "none", description="none: no network at all; bridge: Docker's default network"
    )
    pass_env: list[str] = Field(
        default_factory=list,
        description="worker environment variables passed into the container (no others are)",
    )
    cpus: float = Field(1.0, gt=0, allow_inf_nan=False, description="CPU cores the run may use")
    memory_mb: int = Field(2048, ge=64, description="memory limit: past it the kernel kills")
    pids: int = Field(512, ge=16, description="process limit (a fork bomb stops here)")

    @model_validator(mode="after")
    def _one_image(self) -> DockerSandbox:
        if (self.image is None) == (self.build is None):
            raise ValueError("`docker` needs exactly one of `image` or `build` (a Dockerfile)")
        return self


class AgentConfig(Strict):
    """How one run's agent is started. Tiers override fields of the matrix default."""

    preset: PresetName | None = Field(
        None,
        description="a real agent CLI: fills `command`, `transcript` and `api_key_env` "
        "(each can still be given)",
    )
    permission_flags: str | None = Field(
        None,
        description="with a preset: the CLI's flags for unattended runs (default: the "
        "preset's; '' for none)",
    )
    kind: Literal["command", "openai"] = "command"
    command: str | None = Field(
        None, description="bash command run in the workspace (kind: command)"
    )
    transcript: TranscriptFormatName = "events-jsonl"
    model: str | None = Field(None, description="model under test: selects pricing")
    timeout_s: float = Field(600.0, gt=0, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: list[VariableName] = Field(
        default_factory=list,
        description="variables of the worker's environment the agent gets besides PATH, HOME, "
        "locale and terminal ones and `api_key_env` (no other worker variable reaches it)",
    )
    # The built-in `openai` agent loop.
    base_url: HttpUrl | None = None
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    system_prompt: str | None = None
    system_prompt_file: FilePath | None = None
    skills: list[FilePath] = Field(
        default_factory=list, description="skill files added to the system prompt"
    )
    tools: list[Literal["bash"]] = Field(default_factory=lambda: ["bash"])  # type: ignore[arg-type]
    max_turns: int = Field(20, ge=1, le=1000)
    max_transcript_bytes: int = Field(2_000_000, ge=1024)
    max_workspace_mb: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="stop the agent when its workspace grows past this many MB",
    )
    sandbox: Literal["auto", "user", "bwrap", "docker", "none"] = Field(
        "auto",
        description="auto: a user of the run's own where the worker runs as root, else "
        "none (bwrap for a benchmark task); user: that user (the worker must run as root); "
        "bwrap: read-only system, only the workspace writable, no network but an agent "
        "CLI's; docker: a container of its own per run "
        "(`docker:`); none: unconfined, as the worker's user",
    )
    docker: DockerSandbox | None = Field(None, description="the container, for `sandbox: docker`")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("preset"), str):
            preset = PRESETS.get(data["preset"])
            if preset is not None:
                return {**preset_fields(preset, data.get("permission_flags")), **data}
        return data

    def preset_filled(self) -> set[str]:
        """The fields that hold exactly what the preset filled in: a tier that changes
        the preset or its permission flags gets them filled anew."""
        if self.preset is None:
            return set()
        filled = preset_fields(PRESETS[self.preset], self.permission_flags)
        return {key for key, value in filled.items() if getattr(self, key) == value}

    @property
    def cli(self) -> str | None:
        """The executable a preset runs, which workers must have on PATH."""
        return PRESETS[self.preset].cli if self.preset is not None else None

    @property
    def preset_spec(self) -> AgentPreset | None:
        return PRESETS[self.preset] if self.preset is not None else None

    @model_validator(mode="after")
    def _kind_needs(self) -> AgentConfig:
        if self.preset is not None and self.kind != "command":
            raise ValueError(f"`preset: {self.preset}` runs a CLI: it needs kind 'command'")
        if self.kind == "command" and not self.command:
            raise ValueError("agent kind 'command' needs `command` (the shell command to run)")
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("agent kind 'openai' needs `base_url` and `model`")
        confined_elsewhere = self.sandbox in ("bwrap", "docker")
        if self.kind == "openai" and (confined_elsewhere or self.max_workspace_mb):
            raise ValueError(
                "`sandbox: bwrap|docker` and `max_workspace_mb` apply to agent kind 'command' "
                "only (the built-in agent's commands run as the run's user under `auto`)"
            )
        return self


def _partial(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The same fields, all optional and unvalidated defaults: a tier's overrides."""
    fields: dict[str, Any] = {
        key: (Optional[field.annotation], Field(None, description=field.description))  # noqa: UP045
        for key, field in model.model_fields.items()
    }
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


AgentOverride = _partial(AgentConfig, "AgentOverride")
