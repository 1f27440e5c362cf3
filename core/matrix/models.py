"""matrix.yaml: the experiment a user describes, as strict pydantic models.

Everything that can be checked without running anything is checked here, so a
bad matrix is refused before a single run is enqueued. Relative paths resolve
against the matrix file's folder (passed as validation context ``base_dir``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext import parse as parse_jsonpath
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from core.matrix.assertions import JsonAssertion, parse_assertion
from core.matrix.yaml_model import load_yaml_model
from core.stats.significance import Correction

# The longest the LLM client waits between two attempts (a Retry-After is capped at
# it); a judge's deadline is reckoned with it, so it is the matrix's to state.
MAX_WAIT_S = 60.0


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# --- path and pattern types -------------------------------------------------------


def _resolve(value: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    path = value.expanduser()
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path.resolve() if base is not None else path


def _relocated(path: Path, info: ValidationInfo) -> Path:
    """An input file of a stored matrix read on a worker: the submitter's path -> the
    worker's copy of it (core/files/bundle.py, Manifest.relocation). Outputs (the artifacts
    folder) keep their path: every machine shares it."""
    relocate = (info.context or {}).get("relocate")
    return relocate(path) if relocate is not None else path


def _existing(kind: Literal["file", "dir"]) -> Any:
    def check(value: Path, info: ValidationInfo) -> Path:
        path = _resolve(value, info)
        if (info.context or {}).get("check_files", True):
            exists = path.is_file() if kind == "file" else path.is_dir()
            if not exists:
                raise ValueError(f"{kind} not found: {path}")
        return _relocated(path, info)

    return AfterValidator(check)


FilePath = Annotated[Path, _existing("file")]
DirPath = Annotated[Path, _existing("dir")]


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compiles)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


def _jsonpath(expr: str) -> str:
    try:
        parse_jsonpath(expr)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
        raise ValueError(f"invalid JSONPath {expr!r}: {exc}") from None
    return expr


# --- agent --------------------------------------------------------------------------

TranscriptFormat = Literal[
    "events-jsonl",
    "claude-stream-json",
    "codex-exec-json",
    "opencode-json",
    "gemini-json",
    "gemini-stream-json",
    "plain",
    "auto",
]


class DockerSandbox(Strict):
    """`sandbox: docker`: the container a command agent (and by default its command
    gates) runs in, one per run (worker/docker_sandbox.py)."""

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


@dataclass(frozen=True)
class AgentPreset:
    """What `agent: {preset: NAME}` fills in for a real agent CLI (README, "Agent CLIs").

    The command runs the CLI non-interactively with JSON output, gives it the prompt on
    stdin from $PROMPT_FILE (opencode, which takes it only as an argument: "$PROMPT",
    one quoted word the shell never re-reads; `$(cat ...)` would drop trailing newlines),
    adds the model flag only when `model:` is set, and passes `permission_flags`, what
    an unattended run needs to edit files and run commands without asking.
    """

    cli: str  # the executable, looked for on PATH
    command: str  # with {permissions} where permission_flags go
    transcript: str
    permission_flags: str
    api_key_env: str | None  # the provider key the CLI reads: redacted from results


PRESETS: dict[str, AgentPreset] = {
    "claude-code": AgentPreset(
        cli="claude",
        command="claude -p --output-format stream-json --verbose {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="claude-stream-json",
        permission_flags="--dangerously-skip-permissions",
        api_key_env="ANTHROPIC_API_KEY",
    ),
    "codex": AgentPreset(
        cli="codex",
        command="codex exec --json --skip-git-repo-check {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} - < "$PROMPT_FILE"',
        transcript="codex-exec-json",
        permission_flags="--full-auto",
        api_key_env="OPENAI_API_KEY",
    ),
    "gemini-cli": AgentPreset(
        cli="gemini",
        command="gemini --output-format stream-json {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="gemini-stream-json",
        permission_flags="--yolo",
        api_key_env="GEMINI_API_KEY",
    ),
    "opencode": AgentPreset(
        cli="opencode",
        command="opencode run --format json {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} "$PROMPT"',
        transcript="opencode-json",
        permission_flags="",
        api_key_env=None,
    ),
}
PresetName = Literal["claude-code", "codex", "gemini-cli", "opencode"]


def _preset_fields(preset: AgentPreset, permission_flags: str | None) -> dict[str, Any]:
    flags = preset.permission_flags if permission_flags is None else permission_flags
    return {
        "command": preset.command.replace(" {permissions}", f" {flags}" if flags else ""),
        "transcript": preset.transcript,
        "api_key_env": preset.api_key_env,
    }


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
    transcript: TranscriptFormat = "events-jsonl"
    model: str | None = Field(None, description="model under test: selects pricing")
    timeout_s: float = Field(600.0, gt=0, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    # The built-in `openai` agent loop.
    base_url: str | None = None
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
    sandbox: Literal["none", "bwrap", "docker"] = Field(
        "none",
        description="bwrap: no network, read-only system, only the workspace writable; "
        "docker: a container of its own per run (`docker:`)",
    )
    docker: DockerSandbox | None = Field(None, description="the container, for `sandbox: docker`")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("preset"), str):
            preset = PRESETS.get(data["preset"])
            if preset is not None:
                return {**_preset_fields(preset, data.get("permission_flags")), **data}
        return data

    def preset_filled(self) -> set[str]:
        """The fields that hold exactly what the preset filled in: a tier that changes
        the preset or its permission flags gets them filled anew."""
        if self.preset is None:
            return set()
        filled = _preset_fields(PRESETS[self.preset], self.permission_flags)
        return {key for key, value in filled.items() if getattr(self, key) == value}

    @property
    def cli(self) -> str | None:
        """The executable a preset runs, which workers must have on PATH."""
        return PRESETS[self.preset].cli if self.preset is not None else None

    @model_validator(mode="after")
    def _kind_needs(self) -> AgentConfig:
        if self.preset is not None and self.kind != "command":
            raise ValueError(f"`preset: {self.preset}` runs a CLI: it needs kind 'command'")
        if self.kind == "command" and not self.command:
            raise ValueError("agent kind 'command' needs `command` (the shell command to run)")
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("agent kind 'openai' needs `base_url` and `model`")
        if self.kind == "openai" and (self.sandbox != "none" or self.max_workspace_mb):
            raise ValueError("`sandbox` and `max_workspace_mb` apply to agent kind 'command' only")
        if self.sandbox == "docker" and self.docker is None:
            raise ValueError("`sandbox: docker` needs a `docker:` section with `image` or `build`")
        return self


def _partial(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The same fields, all optional and unvalidated defaults: a tier's overrides."""
    fields: dict[str, Any] = {
        key: (Optional[field.annotation], Field(None, description=field.description))  # noqa: UP045
        for key, field in model.model_fields.items()
    }
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


AgentOverride = _partial(AgentConfig, "AgentOverride")


# --- gates --------------------------------------------------------------------------


class _Gate(Strict):
    name: str | None = Field(None, description="label shown in reports (default: the gate type)")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)


class _CommandGate(_Gate):
    command: str
    where: Literal["container", "host"] = Field(
        "container",
        description="with `sandbox: docker`: run the command in the agent's container (the "
        "tools it had) or on the worker",
    )


class CommandSucceeds(_CommandGate):
    type: Literal["command_succeeds"]


class CommandOutputContains(_CommandGate):
    type: Literal["command_output_contains"]
    substring: str


class CommandOutputMatches(_CommandGate):
    type: Literal["command_output_matches"]
    pattern: Regex


class CommandJsonPath(_CommandGate):
    type: Literal["command_json_path"]
    path: Annotated[str, AfterValidator(_jsonpath)]
    assertion: str

    @field_validator("assertion")
    @classmethod
    def _parses(cls, value: str) -> str:
        parse_assertion(value)
        return value

    @property
    def parsed_assertion(self) -> JsonAssertion:
        return parse_assertion(self.assertion)


class FileExists(_Gate):
    type: Literal["file_exists"]
    path: str


class FileContains(_Gate):
    type: Literal["file_contains"]
    path: str
    substring: str


class FileMatches(_Gate):
    type: Literal["file_matches"]
    path: str
    pattern: Regex


class NoTranscriptErrors(_Gate):
    type: Literal["no_transcript_errors"]


class Script(_CommandGate):
    type: Literal["script"]
    description: str = ""


Gate = Annotated[
    CommandSucceeds
    | CommandOutputContains
    | CommandOutputMatches
    | CommandJsonPath
    | FileExists
    | FileContains
    | FileMatches
    | NoTranscriptErrors
    | Script,
    Field(discriminator="type"),
]


# --- judge ----------------------------------------------------------------------------


class Criterion(Strict):
    id: Identifier
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    description: str


class RubricOutput(Strict):
    format: Literal["json"] = "json"
    require_fields: list[str] = Field(
        default_factory=lambda: ["scores", "weighted_score", "confidence", "issues", "highlights"]
    )


class Rubric(Strict):
    """A rubric file (seed evaluation spec, Layer 3)."""

    criteria: list[Criterion] = Field(min_length=1)
    output: RubricOutput = Field(default_factory=RubricOutput)

    @field_validator("criteria")
    @classmethod
    def _unique(cls, criteria: list[Criterion]) -> list[Criterion]:
        _require_unique([c.id for c in criteria], "criterion id")
        return criteria


def _load_rubric(path: Path, info: ValidationInfo) -> Path:
    if (info.context or {}).get("check_files", True):
        load_rubric(path)
    return path


def load_rubric(path: Path) -> Rubric:
    """Read and validate a rubric file; errors name the file."""
    return load_yaml_model(path, Rubric)


class ScenarioJudge(Strict):
    enabled: bool | Literal["auto"] = Field(
        True, description='"auto": on when the judge API key variable is set at submit time'
    )
    rubric: Annotated[FilePath, AfterValidator(_load_rubric)]
    pass_threshold: Fraction = 0.7


class JudgeConfig(Strict):
    """Where the judge model is reached. The key itself is never in config or results."""

    protocol: Literal["openai", "anthropic"] = "openai"
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str | None = "OPENAI_API_KEY"
    allow_self_judge: bool = Field(False, description="allow judging with the model under test")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    connect_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    max_attempts: int = Field(3, ge=1, le=10)
    deadline_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the whole judge call, every request and wait, ends by this "
        "(default: max_attempts x (connect_timeout_s + timeout_s) + the waits between them)",
    )
    max_transcript_chars: int = Field(24_000, ge=1000)
    max_tokens: int = Field(1024, ge=64)
    repeats: int = Field(
        1,
        ge=1,
        le=20,
        description="judge each run this many times: its score is their mean, their spread "
        'the judge\'s noise (report section "Judge noise")',
    )

    @property
    def deadline(self) -> float:
        """deadline_s, else enough for max_attempts requests that each use their whole
        timeouts, with the longest waits between them."""
        if self.deadline_s is not None:
            return self.deadline_s
        tries = self.max_attempts * (self.connect_timeout_s + self.timeout_s)
        return tries + (self.max_attempts - 1) * MAX_WAIT_S


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


class CompositeWeights(Strict):
    """The seed's optional layered composite (gates / judge / interaction)."""

    gate_weight: Weight = 0.5
    judge_weight: Weight = 0.3
    interaction_weight: Weight = 0.2

    @model_validator(mode="after")
    def _positive_sum(self) -> CompositeWeights:
        if self.gate_weight + self.judge_weight + self.interaction_weight <= 0:
            raise ValueError("composite weights must not all be 0")
        return self


class Evaluation(Strict):
    gates: list[Gate] = Field(default_factory=list)
    judge: ScenarioJudge | None = None
    composite: CompositeWeights | None = None

    @property
    def judge_enabled(self) -> bool:
        return self.judge is not None and self.judge.enabled is True


# --- per-run limits -------------------------------------------------------------------


class Limits(Strict):
    """What one run may spend (core/metrics/limits.py). A tier's and a scenario's combine: the
    lower of each figure applies."""

    max_cost_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD of LLM spend (priced as reported)"
    )
    max_tokens: int | None = Field(
        None, ge=1, description="tokens of all LLM calls: input, output and cache reads/writes"
    )
    max_llm_calls: int | None = Field(None, ge=1, description="LLM calls")

    def combined(self, other: Limits | None) -> Limits:
        if other is None:
            return self
        lower = {
            key: min(v for v in (getattr(self, key), getattr(other, key)) if v is not None)
            for key in Limits.model_fields
            if getattr(self, key) is not None or getattr(other, key) is not None
        }
        return Limits.model_validate(lower)


# --- scenario -------------------------------------------------------------------------


class Target(Strict):
    command_pattern: Regex | None = Field(
        None, description="regex naming target-tool commands; group 1 is the subcommand"
    )
    help_pattern: Regex = r"(^|\s)(--help|-h)(\s|$)"


class ExpectedStep(Strict):
    pattern: Regex
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0


class ProcessConfig(Strict):
    """Inputs of the seed's process metrics, matched against the run's commands."""

    expected_steps: list[ExpectedStep] = Field(default_factory=list)
    goal_patterns: list[Regex] = Field(default_factory=list)
    change_patterns: list[Regex] = Field(
        default_factory=list, description="commands that count as changes (change fail %)"
    )


class Scenario(Strict):
    id: Identifier
    description: str = ""
    workspace: DirPath | None = Field(None, description="template folder copied into each run")
    setup: list[str] = Field(default_factory=list)
    setup_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False)
    prompt: str | None = None
    prompt_file: FilePath | None = None
    target: Target = Field(default_factory=Target)
    evaluation: Evaluation = Field(default_factory=Evaluation)
    process: ProcessConfig | None = None
    queue: str | None = None
    limits: Limits | None = Field(None, description="what each run may spend")
    runs: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="runs per tier of this scenario, instead of the matrix's runs_per_tier "
        "(a fixed count, also in an adaptive matrix)",
    )

    @model_validator(mode="after")
    def _one_prompt(self) -> Scenario:
        if (self.prompt is None) == (self.prompt_file is None):
            raise ValueError("give exactly one of `prompt` or `prompt_file`")
        return self

    def prompt_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        assert self.prompt_file is not None
        return self.prompt_file.read_text(encoding="utf-8")


# --- tiers, scoring, pricing ----------------------------------------------------------


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


DEFAULT_GRADES: dict[str, float] = {"A": 0.95, "B": 0.85, "C": 0.75, "D": 0.65, "F": 0.0}


class Scoring(Strict):
    pass_weight: Weight = 0.5
    impl_weight: Weight = 0.5
    grades: dict[str, Fraction] = Field(
        default_factory=lambda: dict(DEFAULT_GRADES),
        description="grade -> lowest composite median that earns it; one grade must start at 0",
    )

    @model_validator(mode="after")
    def _check(self) -> Scoring:
        if self.pass_weight + self.impl_weight <= 0:
            raise ValueError("pass_weight + impl_weight must be > 0")
        if not self.grades or min(self.grades.values()) != 0.0:
            raise ValueError("grades need one grade with threshold 0 so every score gets a grade")
        return self


class ReportOptions(Strict):
    """How reports test tiers against the baseline (docs/MATRIX.md, `report:`)."""

    correction: Correction = Field(
        "holm",
        description="multiple-comparison correction of every test of a report: holm "
        "(family-wise error rate), bh (Benjamini-Hochberg, false discovery rate) or none",
    )
    alpha: float = Field(
        0.05, gt=0.0, lt=1.0, description="significance level of the family of tests"
    )


class ModelPrice(Strict):
    """USD per 1M tokens."""

    input: Weight
    output: Weight
    cache_read: Weight | None = Field(None, description="default: the input price")
    cache_write: Weight | None = Field(None, description="default: the input price")


# --- spend and run counts ------------------------------------------------------------


class Budget(Strict):
    """`budget:` a hard ceiling on what the whole experiment spends, enforced across every
    worker by a ledger in Redis (core.store.ledger). Agent and judge spend are capped apart."""

    agent_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD the agents under test may spend"
    )
    judge_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD the judge may spend"
    )
    prior_usd: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="projected agent cost of a run before any run of its tier x scenario "
        "has finished (default: the most a finished run of the experiment cost, else the "
        "run's limits.max_cost_usd, else 0)",
    )
    judge_prior_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="the same for the judge's cost of a run"
    )

    @model_validator(mode="after")
    def _some_ceiling(self) -> Budget:
        if self.agent_usd is None and self.judge_usd is None:
            raise ValueError("`budget` needs `agent_usd`, `judge_usd` or both")
        return self


class StopWhen(Strict):
    """When a tier x scenario cell of an adaptive matrix has its answer
    (core.analysis.sequential)."""

    width: float | None = Field(
        None,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="the cell's always-valid pass-rate interval is narrower than this",
    )
    decided: bool = Field(
        False,
        description="the cell's pass rate is decided better or worse than the baseline's "
        "(the baseline's cells run while another tier's cell of their scenario runs)",
    )

    @model_validator(mode="after")
    def _some_question(self) -> StopWhen:
        if self.width is None and not self.decided:
            raise ValueError("`until` needs `width: W` or `decided: true` (or both: either stops)")
        return self


class AdaptiveRuns(Strict):
    """`runs_per_tier: {min, max, until}`: runs go out in waves; a cell stops once its
    question is answered (a procedure valid however often it is looked at), else at max."""

    min: int = Field(ge=1, le=100_000, description="runs of every cell in the first wave")
    max: int = Field(ge=1, le=100_000, description="the most runs a cell gets")
    wave: int | None = Field(
        None, ge=1, le=100_000, description="runs added to each open cell per wave (default: min)"
    )
    until: StopWhen
    alpha: float = Field(
        0.05, gt=0, lt=0.5, allow_inf_nan=False, description="error rate of each cell's stop"
    )

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveRuns:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not be above max ({self.max})")
        return self

    @property
    def step(self) -> int:
        return self.wave or self.min


def _runs_kind(value: Any) -> str:
    return "adaptive" if isinstance(value, dict | AdaptiveRuns) else "count"


# A mapping is adaptive and a number a count: an error names the one that was meant.
RunsPerTier = Annotated[
    Annotated[int, Field(ge=1, le=100_000), Tag("count")]
    | Annotated[AdaptiveRuns, Tag("adaptive")],
    Discriminator(_runs_kind),
]

# --- the files shipped to workers -------------------------------------------------------


# Version control and tools' caches: not what a run needs. Environment files: secrets
# of the submitting machine, which would reach the broker and every worker's agents.
DEFAULT_EXCLUDE = (
    ".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".env", ".env.*",
)  # fmt: skip


class BundleConfig(Strict):
    """What `scheduler submit` ships to the workers with the experiment (core/files/bundle.py):
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


# --- evidence ----------------------------------------------------------------------


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

    dir: Annotated[Path, AfterValidator(_resolve)]


# --- the matrix -----------------------------------------------------------------------


class Matrix(Strict):
    name: Identifier
    description: str = ""
    runs_per_tier: RunsPerTier = Field(
        10, description="runs per tier per scenario, or {min, max, until} for adaptive waves"
    )
    budget: Budget | None = Field(None, description="a hard ceiling on the experiment's spend")
    baseline: str | None = Field(None, description="uplift baseline tier (default: the first)")
    agent: AgentConfig
    # Before `tiers`: their validator reads it.
    allow_outside_files: bool = Field(
        False,
        description="let tier files come from outside the matrix file's folder (they are "
        "copied into every workspace, so the agent and the judge may see them)",
    )
    tiers: list[Tier] = Field(min_length=1)
    scenarios: list[Scenario] = Field(min_length=1)
    judge: JudgeConfig | None = None
    scoring: Scoring = Field(default_factory=Scoring)
    report: ReportOptions = Field(default_factory=ReportOptions)
    pricing: dict[str, ModelPrice] = Field(default_factory=dict)
    max_attempts: int = Field(
        3, ge=1, le=20, description="deliveries of one run before it is an infra error"
    )
    lease_s: float = Field(
        60.0,
        ge=1.0,
        le=3600.0,
        allow_inf_nan=False,
        description="a running run's lease: when its worker stops renewing it for this long, "
        "the run is sent again",
    )
    fail_fast: int = Field(
        3,
        ge=0,
        le=1000,
        description="stop sending a tier's runs when its first this-many results are all the "
        "same infrastructure error (the agent cannot start, setup fails); 0: never",
    )
    keep_workspaces: bool = False
    evidence: EvidenceLimits = Field(default_factory=EvidenceLimits)
    artifacts: Artifacts | None = Field(
        None, description="store evidence as files in a shared folder instead of Redis"
    )
    workspace_archive: WorkspaceArchive | None = Field(
        None, description="keep runs' workspaces in Redis (compressed, bounded) for rescore"
    )
    bundle: BundleConfig = Field(
        default_factory=BundleConfig,
        description="limits of the files shipped to workers with the experiment",
    )
    queue: str | None = None
    secret_env: list[str] = Field(
        default_factory=list, description="environment variables whose values are redacted"
    )
    base_dir: Path | None = Field(
        None,
        description="the folder agents, setup commands and gates get as $EVALFLEET_MATRIX_DIR "
        "(default: the matrix file's folder, which relative paths always resolve against)",
    )

    @field_validator("tiers")
    @classmethod
    def _files_inside_matrix_folder(cls, tiers: list[Tier], info: ValidationInfo) -> list[Tier]:
        # A source such as ../../etc/hostname or ~/.ssh/config would be handed to
        # every agent. Checked where the matrix file is read; a stored matrix has
        # absolute paths and no folder to check against.
        base = (info.context or {}).get("base_dir")
        if base is None or info.data.get("allow_outside_files"):
            return tiers
        folder = Path(base).resolve()
        outside = [
            f"tiers[{index}].files.{dest}: {source} is outside the matrix folder {folder}"
            for index, tier in enumerate(tiers)
            for dest, source in tier.files.items()
            if not source.is_relative_to(folder)
        ]
        if outside:
            raise ValueError(
                "; ".join(outside) + ". Tier files are copied into every run's workspace, "
                "where the agent (and the judge) can read them: move the file into the matrix "
                "folder, or set `allow_outside_files: true` at the top level to allow it"
            )
        return tiers

    @field_validator("base_dir")
    @classmethod
    def _default_base_dir(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir")
        if value is None:
            return Path(base).resolve() if base is not None else None
        return _relocated(_resolve(value, info), info)

    @model_validator(mode="after")
    def _resolve_auto_judge(self, info: ValidationInfo) -> Matrix:
        # Resolved once, where the matrix is loaded: workers see a plain bool.
        environ = (info.context or {}).get("environ", os.environ)
        key_env = self.judge.api_key_env if self.judge is not None else None
        for scenario in self.scenarios:
            judge = scenario.evaluation.judge
            if judge is not None and judge.enabled == "auto":
                judge.enabled = bool(
                    self.judge is not None and (not key_env or environ.get(key_env))
                )
        return self

    @model_validator(mode="after")
    def _cross_checks(self) -> Matrix:
        _require_unique([t.id for t in self.tiers], "tier id")
        _require_unique([s.id for s in self.scenarios], "scenario id")
        if self.baseline is not None and self.baseline not in {t.id for t in self.tiers}:
            raise ValueError(
                f"baseline {self.baseline!r} is not a tier; tiers are {[t.id for t in self.tiers]}"
            )
        for tier in self.tiers:
            self.agent_for(tier)  # raises with the tier named
        for scenario in self.scenarios:
            if scenario.evaluation.judge_enabled:
                self._check_judge(scenario)
        return self

    def _check_judge(self, scenario: Scenario) -> None:
        if self.judge is None:
            raise ValueError(
                f"scenario {scenario.id!r} enables the judge but the matrix has no "
                "top-level `judge:` section"
            )
        if self.judge.allow_self_judge:
            return
        for tier in self.tiers:
            model = self.agent_for(tier).model
            if model is not None and model == self.judge.model:
                raise ValueError(
                    f"judge model {model!r} is the model under test in tier {tier.id!r}; "
                    "use another judge model or set judge.allow_self_judge: true"
                )

    @property
    def baseline_tier(self) -> str:
        return self.baseline or self.tiers[0].id

    def tier(self, tier_id: str) -> Tier:
        return next(t for t in self.tiers if t.id == tier_id)

    def scenario(self, scenario_id: str) -> Scenario:
        return next(s for s in self.scenarios if s.id == scenario_id)

    def limits_for(self, tier: Tier, scenario: Scenario) -> Limits:
        """The run's limits: the lower of the tier's and the scenario's, figure by figure."""
        return (tier.limits or Limits()).combined(scenario.limits)

    def queue_for(self, tier: Tier, scenario: Scenario) -> str | None:
        """The queue a tier x scenario's runs go to; None: the workers' default."""
        return tier.queue or scenario.queue or self.queue

    def agent_for(self, tier: Tier) -> AgentConfig:
        """The matrix agent with the tier's overrides merged in (env merged key by key)."""
        if tier.agent is None:
            return self.agent
        override = tier.agent.model_dump(exclude_none=True)
        inherited = self.agent.preset_filled()
        if override.get("preset", self.agent.preset) != self.agent.preset:
            # Another CLI: nothing of the matrix agent's CLI command line carries over.
            inherited |= {"command", "transcript", "api_key_env", "permission_flags"}
        merged = self.agent.model_dump(exclude_none=True, exclude=inherited)
        merged["env"] = {**self.agent.env, **override.pop("env", {})}
        merged.update(override)
        try:
            return AgentConfig.model_validate(merged, context={"check_files": False})
        except ValueError as exc:
            raise ValueError(f"tier {tier.id!r}: agent after overrides is invalid: {exc}") from None

    @property
    def adaptive(self) -> AdaptiveRuns | None:
        return self.runs_per_tier if isinstance(self.runs_per_tier, AdaptiveRuns) else None

    def runs_for(self, scenario: Scenario) -> int:
        """The most runs each tier gets of `scenario`: its own `runs:`, else the matrix's
        (an adaptive matrix's max)."""
        if scenario.runs is not None:
            return scenario.runs
        adaptive = self.adaptive
        if adaptive is not None:
            return adaptive.max
        assert isinstance(self.runs_per_tier, int)
        return self.runs_per_tier

    def first_wave(self, scenario: Scenario) -> int:
        """The runs each tier of `scenario` gets at once: all, unless the matrix is adaptive."""
        adaptive = self.adaptive
        if adaptive is None or scenario.runs is not None:
            return self.runs_for(scenario)
        return adaptive.min

    def first_wave_runs(self) -> int:
        return len(self.tiers) * sum(self.first_wave(s) for s in self.scenarios)

    def total_runs(self) -> int:
        """The most runs the experiment may have (an adaptive one stops cells early)."""
        return len(self.tiers) * sum(self.runs_for(s) for s in self.scenarios)


def _require_unique(values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r}; each must be unique")
        seen.add(value)


def matrix_json_schema() -> dict[str, Any]:
    schema = Matrix.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "evalfleet matrix.yaml"
    return schema
