"""scheduler.validation: a matrix checked and prepared for a submit, from Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import BundleError, ConfigError, InputError, PlanTooLarge
from scheduler.validation import missing_clis, prepare, summary, validate
from tests.conftest import EXAMPLES

MATRIX = """\
name: demo
runs_per_tier: 3
agent: {command: "echo hi", timeout_s: 30}
tiers: [{id: T0}, {id: T1}]
scenarios:
  - id: s
    prompt: p
    evaluation: {gates: [{type: file_exists, path: out.txt}]}
"""


def write(tmp_path: Path, text: str = MATRIX) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def test_validate_checks_the_example_and_collects_its_files() -> None:
    checked = validate(EXAMPLES / "matrix.yaml")
    assert checked.matrix.total_runs() == 30
    assert checked.bundle.size > 0 and checked.bundle.manifest.digests()
    assert summary(checked.matrix).splitlines()[0] == (
        "notes-guidance: 3 tiers x 2 scenarios x 5 runs = 30 runs"
    )


def test_prepare_applies_what_a_submit_changes(tmp_path: Path) -> None:
    checked = prepare(
        write(tmp_path), budget=12.5, keep_workspaces=True, artifacts=tmp_path / "evidence"
    )
    matrix = checked.matrix
    assert matrix.budget is not None and matrix.budget.agent_usd == 12.5
    assert matrix.keep_workspaces
    assert matrix.artifacts is not None and matrix.artifacts.dir == tmp_path / "evidence"
    assert (tmp_path / "evidence").is_dir()  # made, so the workers can write to it
    assert summary(matrix).splitlines()[-1] == "budget: agents $12.5"


def test_a_matrix_with_problems_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        validate(write(tmp_path, MATRIX.replace("runs_per_tier: 3", "runz: 3")))
    assert any("runz" in str(p) for p in raised.value.problems)


def test_too_many_runs_and_too_long_runs_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLEET_MAX_RUNS", "5")
    with pytest.raises(PlanTooLarge, match=r"= 6 runs, more than .*; nothing was started$"):
        validate(write(tmp_path))
    monkeypatch.delenv("EVALFLEET_MAX_RUNS")
    monkeypatch.setenv("EVALFLEET_VISIBILITY_TIMEOUT", "20")
    with pytest.raises(InputError, match="more than the broker's visibility timeout"):
        validate(write(tmp_path))


def test_files_that_cannot_ship_are_a_bundle_error(tmp_path: Path) -> None:
    (tmp_path / "big.md").write_bytes(b"x" * 2 * 1024 * 1024)
    text = MATRIX.replace("tiers: [{id: T0}, {id: T1}]", "tiers: [{id: T0, files: {A.md: big.md}}]")
    with pytest.raises(BundleError, match=r"nothing was started$"):
        validate(write(tmp_path, text + "bundle: {max_mb: 1}\n"))


def test_an_artifacts_folder_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"^--artifacts: cannot create .*/file/evidence"):
        prepare(write(tmp_path), artifacts=tmp_path / "file" / "evidence")


def test_missing_clis_names_the_tiers_of_a_preset_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    text = MATRIX.replace(
        'agent: {command: "echo hi", timeout_s: 30}', "agent: {preset: claude-code}"
    )
    assert missing_clis(validate(write(tmp_path, text)).matrix) == {"claude": ["T0", "T1"]}
