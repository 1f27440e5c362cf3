"""The experiment as the user wrote it: matrix.yaml's models (tiers, scenarios,
evaluation, judge, budget, report options), its assertions, and reading a YAML file
into them. Pure: no broker, no HTTP, no subprocess (import-linter holds it so).
"""

from core.matrix import gates
from core.matrix.adaptive import AdaptiveRuns, StopWhen
from core.matrix.agent import AgentConfig, AgentOverride, DockerSandbox
from core.matrix.gates import *  # noqa: F403  (every gate type, as gates.__all__ lists it)
from core.matrix.judging import (
    MAX_WAIT_S,
    Criterion,
    JudgeConfig,
    Rubric,
    RubricOutput,
    ScenarioJudge,
)
from core.matrix.loading import load_matrix, load_rubric
from core.matrix.matrix import Matrix, matrix_json_schema
from core.matrix.presets import PRESETS, TRANSCRIPT_FORMATS, AgentPreset
from core.matrix.scenario import ExpectedStep, ProcessConfig, Scenario, Target
from core.matrix.scoring import DEFAULT_GRADES, CompositeWeights, Evaluation, ReportOptions, Scoring
from core.matrix.spend import Budget, Limits, ModelPrice
from core.matrix.storage import Artifacts, BundleConfig, EvidenceLimits, WorkspaceArchive
from core.matrix.suggestions import did_you_mean
from core.matrix.task import (
    LOGS_DIR,
    SOLUTION_DIR,
    TESTS_DIR,
    VERIFIER_LOGS,
    TaskEnvironment,
    Verifier,
)
from core.matrix.task_folders import task_format
from core.matrix.tier import Tier
from core.matrix.yaml_model import ConfigProblem, load_yaml_model, problem_at

__all__ = [
    "DEFAULT_GRADES",
    "LOGS_DIR",
    "MAX_WAIT_S",
    "PRESETS",
    "SOLUTION_DIR",
    "TESTS_DIR",
    "TRANSCRIPT_FORMATS",
    "VERIFIER_LOGS",
    "AdaptiveRuns",
    "AgentConfig",
    "AgentOverride",
    "AgentPreset",
    "Artifacts",
    "Budget",
    "BundleConfig",
    "CompositeWeights",
    "ConfigProblem",
    "Criterion",
    "DockerSandbox",
    "Evaluation",
    "EvidenceLimits",
    "ExpectedStep",
    "JudgeConfig",
    "Limits",
    "Matrix",
    "ModelPrice",
    "ProcessConfig",
    "ReportOptions",
    "Rubric",
    "RubricOutput",
    "Scenario",
    "ScenarioJudge",
    "Scoring",
    "StopWhen",
    "Target",
    "TaskEnvironment",
    "Tier",
    "Verifier",
    "WorkspaceArchive",
    "did_you_mean",
    "load_matrix",
    "load_rubric",
    "load_yaml_model",
    "matrix_json_schema",
    "problem_at",
    "task_format",
]
__all__ += gates.__all__
