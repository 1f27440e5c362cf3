"""`scheduler preflight`: each tier x scenario run once, locally, against the scripted
model server, and the scenarios themselves checked, before anything is spent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

REFUSES = """echo "error: unexpected argument '--full-auto' found" >&2; exit 2"""


def write_matrix(folder: Path, broken: bool) -> Path:
    reference = "printf bye > out.txt" if broken else "printf hello > out.txt"
    vacuous = "true" if broken else "test -s out.txt"
    key = "PREFLIGHT_UNSET_JUDGE_KEY" if broken else "PREFLIGHT_SET_JUDGE_KEY"
    refusing = f"  - {{id: refusing, agent: {{command: {json.dumps(REFUSES)}}}}}" if broken else ""
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: preflight
runs_per_tier: 3
agent: {{command: "printf hello > out.txt", transcript: plain, model: m}}
tiers:
  - id: writes
{refusing}
scenarios:
  - id: solved
    prompt: Write hello to out.txt.
    reference: {reference}
    evaluation: {{gates: [{{type: file_contains, path: out.txt, substring: hello}}]}}
  - id: checked
    prompt: Write anything to out.txt.
    evaluation: {{gates: [{{type: command_succeeds, command: "{vacuous}"}}]}}
  - id: judged
    prompt: Write hello to out.txt.
    reference: printf hello > out.txt
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{enabled: true, rubric: rubric.yaml}}
judge: {{api_key_env: {key}}}
pricing: {{m: {{input: 1.0, output: 2.0}}}}
""")
    (folder / "rubric.yaml").write_text(
        "criteria:\n  - {id: quality, weight: 1.0, description: is it right}\n"
    )
    return path


@pytest.mark.integration
def test_a_sound_matrix_gets_one_line_per_cell_and_exit_0(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    matrix = write_matrix(tmp_path, broken=False)
    checked = run_cli("preflight", str(matrix), env={**fleet_env, "PREFLIGHT_SET_JUDGE_KEY": "k"})
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0].split()[:3] == ["tier", "scenario", "cli"]
    rows = {tuple(line.split()[:2]): line.split() for line in lines[1:4]}
    assert set(rows) == {("writes", "solved"), ("writes", "checked"), ("writes", "judged")}
    solved = rows[("writes", "solved")]
    # cli, run, transcript, gates, vacuous, reference, judge key
    assert solved[2:9] == ["-", "completed", "plain", "1/1", "no", "passes", "-"]
    assert rows[("writes", "judged")][8] == "set"
    assert lines[4].startswith("estimated spend of the experiment: $")
    assert checked.stderr == ""


@pytest.mark.integration
def test_each_way_an_experiment_is_unsound_is_one_line_and_exit_2(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """A failing reference, a vacuous gate, a CLI that refuses its flags and an unset
    judge key: exactly those four lines, each naming where."""
    matrix = write_matrix(tmp_path, broken=True)
    checked = run_cli("preflight", str(matrix), env=fleet_env)
    assert checked.returncode == 2, checked.stdout
    problems = checked.stderr.splitlines()
    assert problems[-1] == "4 problem(s): the experiment is not sound yet"
    assert len(problems) == 5, problems
    by_place = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in problems[:-1]}
    assert by_place["scenario solved"].startswith(
        "the reference solution does not pass its gates: "
    )
    assert by_place["scenario checked"].endswith("they check nothing")
    assert "PREFLIGHT_UNSET_JUDGE_KEY is unset" in by_place["scenario judged"]
    refusing = by_place["tier refusing"]
    assert refusing.startswith("the agent's run was agent_error: ")
    assert "unexpected argument '--full-auto'" in refusing
    table = checked.stdout.splitlines()
    assert len([row for row in table[1:] if row.startswith(("writes", "refusing"))]) == 6


@pytest.mark.integration
def test_the_example_is_sound(fleet_env: dict[str, str]) -> None:
    checked = run_cli("preflight", str(ROOT / "examples" / "matrix.yaml"), env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    assert len(checked.stdout.splitlines()) == 1 + 6 + 1  # header, 3 tiers x 2 scenarios, spend
