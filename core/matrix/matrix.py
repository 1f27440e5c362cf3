"""matrix.yaml as a whole: the experiment a user describes, as strict pydantic models.

Everything that can be checked without running anything is checked here, so a
bad matrix is refused before a single run is enqueued. Relative paths resolve
against the matrix file's folder (validation context ``base_dir``; core.matrix.fields
lists what else the context holds).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.matrix.adaptive import AdaptiveRuns, RunsPerTier
from core.matrix.agent import AgentConfig
from core.matrix.fields import (
    ALSO_REFUSED,
    Identifier,
    PlacedError,
    PlacedErrors,
    Strict,
    context_of,
    duplicates,
    inside_matrix_folder,
    relocated,
    resolve,
)
from core.matrix.judging import JudgeConfig
from core.matrix.scenario import Scenario
from core.matrix.scoring import ReportOptions, Scoring
from core.matrix.spend import Budget, Limits, ModelPrice
from core.matrix.storage import Artifacts, BundleConfig, EvidenceLimits, WorkspaceArchive
from core.matrix.suggestions import did_you_mean
from core.matrix.tier import Tier


class Matrix(Strict):
    name: Identifier
    description: str = ""
    runs_per_tier: RunsPerTier = Field(
        10, description="runs per tier per scenario, or {min, max, until} for adaptive waves"
    )
    budget: Budget | None = Field(None, description="a hard ceiling on the experiment's spend")
    baseline: str | None = Field(None, description="uplift baseline tier (default: the first)")
    agent: AgentConfig
    allow_outside_files: bool = Field(
        False,
        description="let the paths the matrix names (tier files, prompt_file, workspace, "
        "rubrics, skills, ...) lie outside the matrix file's folder (they are shipped to "
        "every worker, so the agent and the judge may read them)",
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
        "same infrastructure error (the agent cannot start, setup fails), and none of its "
        "results so far was another; 0: never",
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

    @model_validator(mode="before")
    @classmethod
    def _outside_files_to_context(cls, data: Any, info: ValidationInfo) -> Any:
        # Every input path's validator (core.matrix.fields.inside_matrix_folder) reads the
        # key from the context: a nested model does not see its matrix's other fields.
        if isinstance(data, dict) and info.context is not None:
            info.context["allow_outside_files"] = data.get("allow_outside_files") is True
        return data

    @field_validator("base_dir")
    @classmethod
    def _default_base_dir(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = context_of(info).get("base_dir")
        if value is None:
            return Path(base).resolve() if base is not None else None
        return relocated(inside_matrix_folder(resolve(value, info), info), info)

    @model_validator(mode="after")
    def _resolve_auto_judge(self, info: ValidationInfo) -> Matrix:
        # Resolved once, against the environment the loading step gives (core.matrix.loading:
        # the submitter's): workers see a plain bool. Before the cross-checks, which apply
        # to the judges it turns on.
        environ = context_of(info).get("environ", {})
        key_env = self.judge.api_key_env if self.judge is not None else None
        for scenario in self.scenarios:
            judge = scenario.evaluation.judge
            if judge is not None and judge.enabled == "auto":
                judge.enabled = bool(
                    self.judge is not None and (not key_env or environ.get(key_env))
                )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _with_the_ids_checked(
        cls, data: Any, handler: ModelWrapValidatorHandler[Matrix], info: ValidationInfo
    ) -> Matrix:
        # A key's error ends validation before the checks across keys (`_cross_checks`):
        # those of the ids, which need no valid model, are handed to the loading step
        # with it (the context's ALSO_REFUSED), to be said together, not on the next run
        # of `validate`.
        try:
            return handler(data)
        except ValidationError:
            if isinstance(data, dict) and info.context is not None:
                tiers, scenarios = _ids(data.get("tiers")), _ids(data.get("scenarios"))
                found = _identity_problems(tiers, scenarios, data.get("baseline"))
                info.context.setdefault(ALSO_REFUSED, []).extend(found)
            raise

    @model_validator(mode="after")
    def _cross_checks(self) -> Matrix:
        errors = _identity_problems(
            [t.id for t in self.tiers], [s.id for s in self.scenarios], self.baseline
        )
        for index, tier in enumerate(self.tiers):
            try:
                agent = self.agent_for(tier)
            except ValueError as exc:  # its message names the tier
                errors.append(PlacedError(("tiers", index, "agent"), str(exc)))
                continue
            if agent.sandbox == "docker" and agent.docker is None:
                # A benchmark task with an image of its own needs no `docker:` image.
                bare = [s.id for s in self.scenarios if not s.has_image]
                if bare:
                    errors.append(
                        PlacedError(
                            ("tiers", index),
                            f"tier {tier.id!r}: `sandbox: docker` needs a `docker:` section "
                            f"with `image` or `build` for scenarios without an image of their "
                            f"own (`environment.image` or `build`): {', '.join(bare[:5])}",
                        )
                    )
        errors += self._judge_problems()
        PlacedErrors.raise_any(errors)
        return self

    def _judge_problems(self) -> list[PlacedError]:
        judged = [(i, s) for i, s in enumerate(self.scenarios) if s.evaluation.judge_enabled]
        if self.judge is None:
            return [
                PlacedError(
                    ("scenarios", index, "evaluation", "judge"),
                    f"scenario {scenario.id!r} enables the judge but the matrix has no "
                    "top-level `judge:` section: add one (its `model:` and `api_key_env:`), or "
                    "judge only where one is set with this scenario's `judge: {enabled: auto}`",
                )
                for index, scenario in judged
            ]
        if not judged or self.judge.allow_self_judge:
            return []
        for tier in self.tiers:
            with contextlib.suppress(ValueError):  # an invalid tier is said on its own
                model = self.agent_for(tier).model
                if model is not None and model == self.judge.model:
                    return [
                        PlacedError(
                            ("judge", "model"),
                            f"judge model {model!r} is the model under test in tier "
                            f"{tier.id!r}; use another judge model or set "
                            "judge.allow_self_judge: true",
                        )
                    ]
        return []

    @classmethod
    def submitted(cls, data: Any, relocate: Callable[[Path], Path] | None = None) -> Matrix:
        """A matrix as it was submitted (its JSON), read back: its paths were resolved and
        checked at submit, and a worker on another machine reports a missing file when a
        run uses it; `relocate` maps each path (the submitter's) to where this machine has
        the file (Manifest.relocation)."""
        return cls.model_validate(data, context={"check_files": False, "relocate": relocate})

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
        except ValidationError as exc:
            said = "; ".join(
                ".".join(map(str, e["loc"])) + ": " * bool(e["loc"])
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )  # fmt: skip
            raise ValueError(
                f"tier {tier.id!r}: its agent (the matrix agent with this tier's keys over it) "
                f"is invalid: {said}"
            ) from None

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


def matrix_json_schema() -> dict[str, Any]:
    schema = Matrix.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "evalfleet matrix.yaml"
    return schema


def _identity_problems(
    tiers: list[str | None], scenarios: list[str | None], baseline: Any
) -> list[PlacedError]:
    """Ids given twice, and a baseline that is not a tier (None: an entry without an id)."""
    errors = duplicates(tiers, "tier id", ("tiers",))
    errors += duplicates(scenarios, "scenario id", ("scenarios",))
    named = list(dict.fromkeys(t for t in tiers if t is not None))
    if isinstance(baseline, str) and named and baseline not in named:
        hint = did_you_mean(baseline, named)
        errors.append(
            PlacedError(
                ("baseline",),
                f"baseline {baseline!r} is not a tier; tiers are {named}"
                + (f"; {hint}" if hint else ""),
            )
        )
    return errors


def _ids(entries: Any) -> list[str | None]:
    """The `id` of each entry of a list as the file gives it (None where it has none)."""
    if not isinstance(entries, list):
        return []
    return [e.get("id") if isinstance(e, dict) and isinstance(e.get("id"), str) else None
            for e in entries]  # fmt: skip
