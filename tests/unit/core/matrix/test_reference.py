"""docs/MATRIX.md cannot drift from the code.

Every yaml example of the reference loads through the real loader; every gate
example passes against the example workspace the doc shows; every key of the
matrix and rubric models is named in its section; every assertion form is both
listed and exemplified. The block markers are explained at the top of the doc.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from core.evaluation.gates import run_gates
from core.matrix import (
    GATES,
    AdaptiveRuns,
    AgentConfig,
    AgentOverride,
    Artifacts,
    Budget,
    BundleConfig,
    CompositeWeights,
    Criterion,
    DockerSandbox,
    Evaluation,
    EvidenceLimits,
    ExpectedStep,
    JudgeConfig,
    Limits,
    Matrix,
    ModelPrice,
    ProcessConfig,
    ReportOptions,
    Rubric,
    RubricOutput,
    Scenario,
    ScenarioJudge,
    Scoring,
    StopWhen,
    Target,
    TaskEnvironment,
    Tier,
    Verifier,
    WorkspaceArchive,
    load_matrix,
    load_rubric,
)
from core.matrix.assertions import FORMS, parse_assertion
from core.results.run import RunSpec
from core.results.transcript import CommandRecord
from tests.conftest import FIXTURES, ROOT
from worker.run import agent_env
from worker.workspace import RunDir

DOC = ROOT / "docs" / "MATRIX.md"
MYTOOL_DIR = ROOT / "examples" / "bin"  # the example's real CLI, which the gate examples call
KINDS = {"matrix minimal", "matrix", "fragment", "gates", "rubric", "workspace"}
# Created beside every matrix example (the doc's top comment lists them).
SUPPORT_FILES = ("prompts/create_notes.md", "guidance/AGENTS.md", "skills/my-tool.md")
SUPPORT_DIRS = ("fixtures/notes", "tasks/fix-the-build/tests", "tasks/fix-the-build/solution")
# Benchmark task folders the examples name: their copies -> the fixture tasks copied.
SUPPORT_TASKS = {
    "datasets/tb": sorted((FIXTURES / "tasks").glob("tb-*")),
    "datasets/harbor": [FIXTURES / "tasks" / "hello-file"],
}
HARBOR_EXAMPLE = "hello-world"


@dataclass(frozen=True)
class Block:
    kind: str | None  # from the `<!-- check: KIND -->` line right before it
    lang: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"MATRIX.md:{self.line}"


def _blocks() -> list[Block]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if start is None:
            start = number
            continue
        marker = re.fullmatch(r"<!-- check: ([\w ]+) -->", lines[start - 1].strip())
        text = "\n".join(lines[start + 1 : number]) + "\n"
        blocks.append(Block(marker and marker[1], lines[start][3:], start + 1, text))
        start = None
    assert start is None, f"MATRIX.md:{start + 1}: code block never closed"
    return blocks


BLOCKS = _blocks()


def _of(*kinds: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind in kinds]


def _only(kind: str) -> Block:
    blocks = _of(kind)
    assert len(blocks) == 1, f"MATRIX.md needs exactly one block marked `check: {kind}`"
    return blocks[0]


def _write_matrix(folder: Path, data: dict[str, Any]) -> Path:
    for name in SUPPORT_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"{name}\n", encoding="utf-8")
    for name in SUPPORT_DIRS:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for name, tasks in SUPPORT_TASKS.items():
        for task in tasks:
            copy = folder / name / (HARBOR_EXAMPLE if name.endswith("harbor") else task.name)
            if not copy.exists():
                shutil.copytree(task, copy)
    (folder / "rubrics").mkdir(exist_ok=True)
    (folder / "rubrics" / "notes.yaml").write_text(_only("rubric").text, encoding="utf-8")
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _minimal() -> dict[str, Any]:
    data = yaml.safe_load(_only("matrix minimal").text)
    assert isinstance(data, dict)
    return data


def _matrix_of(block: Block) -> dict[str, Any]:
    """The complete matrix a block stands for (see the doc's top comment)."""
    data = yaml.safe_load(block.text)
    if block.kind in ("matrix", "matrix minimal"):
        return data
    minimal = _minimal()
    if block.kind == "fragment":
        return {**minimal, **data}
    assert block.kind == "gates" and isinstance(data, list), f"{block}: expected a list of gates"
    minimal["scenarios"][0]["evaluation"] = {"gates": data}
    return minimal


def test_every_yaml_block_is_marked() -> None:
    for block in BLOCKS:
        if block.lang == "yaml" or block.kind is not None:
            assert block.kind in KINDS, f"{block}: yaml block without a known check marker"
    assert len(_of("matrix minimal")) == len(_of("workspace")) == len(_of("rubric")) == 1


@pytest.mark.parametrize("block", _of("matrix minimal", "matrix", "fragment", "gates"), ids=str)
def test_matrix_example_loads(block: Block, tmp_path: Path) -> None:
    load_matrix(_write_matrix(tmp_path, _matrix_of(block)))


def test_rubric_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "rubric.yaml"
    path.write_text(_only("rubric").text, encoding="utf-8")
    assert load_rubric(path).criteria


# --- gates run for real ----------------------------------------------------------------------


def _gate_env(matrix_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{MYTOOL_DIR}{os.pathsep}{os.environ['PATH']}",
        "EVALFLEET_MATRIX_DIR": str(matrix_dir),
    }


@pytest.fixture(scope="module")
def example_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace the doc's gate examples are said to pass against."""
    workspace = tmp_path_factory.mktemp("workspace")
    script = _only("workspace").text
    subprocess.run(
        ["bash", "-euc", script], cwd=workspace, env=_gate_env(workspace), check=True, timeout=60
    )
    return workspace


def _agent_commands() -> list[CommandRecord]:
    """The workspace block's commands, as the transcript of the run that made it."""
    lines = [line for line in _only("workspace").text.splitlines() if line.strip()]
    return [CommandRecord(command=line, exit_code=0) for line in lines]


@pytest.mark.parametrize("block", _of("gates"), ids=str)
def test_gate_example_passes(block: Block, example_workspace: Path, tmp_path: Path) -> None:
    matrix = load_matrix(_write_matrix(tmp_path, _matrix_of(block)))
    gates = matrix.scenarios[0].evaluation.gates
    results = run_gates(
        gates, example_workspace, target_commands=_agent_commands(), env=_gate_env(tmp_path)
    )
    failed = [f"{r.name or r.gate_type}: {r.message}" for r in results if not r.passed]
    assert not failed, f"{block}: gate examples that do not pass: {failed}"


def _example_gates() -> Iterator[dict[str, Any]]:
    for block in _of("gates"):
        yield from yaml.safe_load(block.text)


def test_every_gate_type_has_an_example() -> None:
    shown = {gate["type"] for gate in _example_gates()}
    assert shown == set(GATES)


def test_every_assertion_form_is_listed_and_exemplified() -> None:
    text = DOC.read_text(encoding="utf-8")

    def shape(assertion: str) -> tuple[str, str | None]:
        parsed = parse_assertion(assertion)
        return parsed.op, parsed.comparator

    forms = FORMS.split(" | ")
    for form in forms:
        assert f"`{form}`" in text, f"assertion form {form!r} is not listed"
    # A form's placeholders filled in, to learn which operation it is.
    wanted = {shape(re.sub(r"<\w+>", "x", form).replace("N", "1")) for form in forms}
    shown = {
        shape(gate["assertion"]) for gate in _example_gates() if gate["type"] == "command_json_path"
    }
    assert wanted <= shown, f"assertion forms without an example: {wanted - shown}"


# --- documented behaviour --------------------------------------------------------------------


def _fragment_with(needle: str) -> Block:
    [block] = [b for b in _of("fragment") if needle in b.text]
    return block


def test_judge_auto_follows_the_key_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_matrix(tmp_path, _matrix_of(_fragment_with("enabled: auto")))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert not load_matrix(path).scenarios[0].evaluation.judge_enabled
    monkeypatch.setenv("OPENAI_API_KEY", "sk-doc-example")
    assert load_matrix(path).scenarios[0].evaluation.judge_enabled


def test_env_expansion_is_as_documented(tmp_path: Path) -> None:
    matrix = load_matrix(_write_matrix(tmp_path, _matrix_of(_fragment_with("PRICE_NOTE"))))
    spec = RunSpec(
        experiment_id="e", run_id="e:T0:hello:0", tier="T0", scenario="hello", run_index=0
    )
    env = agent_env(spec, matrix, RunDir(tmp_path / "run"), "the prompt")
    assert env["PATH"] == f"{tmp_path}/bin:{os.environ['PATH']}"
    assert env["NOTES_HOME"] == f"{tmp_path}/notes"
    assert env["PRICE_NOTE"] == "costs $5"


# --- every key is documented -----------------------------------------------------------------

GATE_KEYS = "gate keys"  # `type`, `name`, `timeout_s`: the keys every gate has
# The doc section (heading) that must name each key of a model.
SECTIONS: dict[type[BaseModel] | str, str] = {
    Matrix: "## Top level",
    AgentConfig: "## agent",
    Tier: "## tiers",
    Scenario: "## scenarios",
    Target: "### target",
    TaskEnvironment: "### environment",
    Verifier: "### verifier",
    ProcessConfig: "### process",
    ExpectedStep: "### process",
    Limits: "### limits",
    Evaluation: "## evaluation",
    GATE_KEYS: "### Gates",
    ScenarioJudge: "### evaluation.judge",
    CompositeWeights: "### composite",
    JudgeConfig: "## judge",
    Rubric: "### Rubric files",
    Criterion: "### Rubric files",
    RubricOutput: "### Rubric files",
    Scoring: "## scoring",
    ReportOptions: "## report",
    ModelPrice: "## pricing",
    EvidenceLimits: "## evidence",
    Artifacts: "## evidence",
    DockerSandbox: "### agent.docker",
    Budget: "## budget",
    AdaptiveRuns: "## adaptive runs_per_tier",
    StopWhen: "## adaptive runs_per_tier",
    WorkspaceArchive: "### workspace_archive",
    BundleConfig: "## bundle",
    **{gate: f"#### {tag}" for tag, gate in GATES.items()},
}
EXEMPT: dict[type[BaseModel], str] = {
    AgentOverride: "a tier's `agent:` takes the keys of `agent`, documented there",
}


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """`root` and every model its fields can hold, however nested."""
    seen: set[type[BaseModel]] = set()
    todo: list[Any] = [root]
    while todo:
        annotation = todo.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.add(annotation)
                todo.extend(f.annotation for f in annotation.model_fields.values())
        else:
            todo.extend(typing.get_args(annotation))
    yield from seen


def _section(heading: str) -> str:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    assert heading in lines, f"MATRIX.md has no heading {heading!r}"
    start = lines.index(heading)
    level = len(heading.split()[0])
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _named(key: str, text: str) -> bool:
    # `key`, or a dotted path ending in it: `criteria[].id`, `output.format`.
    return re.search(rf"`(?:[\w.\[\]]+\.)?{re.escape(key)}`", text) is not None


def test_every_key_of_every_model_is_documented() -> None:
    gate_keys = set.intersection(*(set(g.model_fields) for g in GATES.values()))
    assert gate_keys == {"type", "name", "timeout_s"}
    # Keys every command gate has besides its `command`, documented once under Gates.
    command_gates = [g for g in GATES.values() if "command" in g.model_fields]
    gate_keys |= set.intersection(*(set(g.model_fields) for g in command_gates)) - {"command"}
    assert AgentOverride.model_fields.keys() == AgentConfig.model_fields.keys()
    missing = []
    for model in {*_models(Matrix), *_models(Rubric)}:
        if model in EXEMPT:
            continue
        assert model in SECTIONS, f"{model.__name__} is new: map it to its MATRIX.md section"
        keys = set(model.model_fields) - (gate_keys if model in GATES.values() else set())
        section = _section(SECTIONS[model])
        missing += [f"{model.__name__}.{key}" for key in sorted(keys) if not _named(key, section)]
    gates_section = _section(SECTIONS[GATE_KEYS])
    missing += [f"gate.{key}" for key in sorted(gate_keys) if not _named(key, gates_section)]
    assert not missing, f"keys not documented in their MATRIX.md section: {missing}"
