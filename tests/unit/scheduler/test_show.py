"""scheduler.show: what `scheduler show` prints of a run."""

from __future__ import annotations

import pytest

from core.evidence.models import Excerpt, GateEvidence, RunEvidence, RunRecord
from core.results.run import GateResult, RunResult, RunSpec, RunStatus
from scheduler.cli.context import err
from scheduler.show import OUTPUT_LINES, render_run

SPEC = RunSpec(experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0)


def _shown(output: str) -> str:
    """`scheduler show` of a run whose one gate ran `env` and printed `output`."""
    gate = GateResult(gate_type="command_succeeds", passed=False, message="exit 1")
    seen = GateEvidence(command="env", exit_code=1, output=Excerpt.whole(output))
    record = RunRecord(
        result=RunResult.of(SPEC, RunStatus.completed, gates=[gate]),
        evidence=RunEvidence(experiment_id="e", run_id=SPEC.run_id, gates=[seen]),
    )
    return render_run(record, SPEC.run_id, width=120)


def test_a_gates_long_output_shows_its_last_lines_and_says_how_many_came_before() -> None:
    shown = _shown("".join(f"line {i}\n" for i in range(OUTPUT_LINES + 10)))
    assert "[... 10 earlier lines: --json shows them ...]" in shown
    assert f"line {OUTPUT_LINES + 9}" in shown and "line 10\n" in shown
    assert "line 9\n" not in shown


def test_a_gates_short_output_is_shown_whole_without_a_note() -> None:
    shown = _shown("a\nb\n")
    assert "    a\n    b\n" in shown and "earlier line" not in shown


def test_a_run_id_is_printed_as_it_is_not_as_emoji() -> None:
    # rich turns `:a:` and `:b:` into emoji: a tier A of a scenario named fire showed as
    # `…🅰fire:0`, which no one could copy back into a command.
    spec = SPEC.model_copy(update={"run_id": "e:A:fire:0", "tier": "A", "scenario": "fire"})
    record = RunRecord(
        result=RunResult.of(spec, RunStatus.completed),
        evidence=RunEvidence(experiment_id="e", run_id=spec.run_id),
    )
    assert "e:A:fire:0" in render_run(record, spec.run_id, width=120)


def test_the_commands_console_prints_run_ids_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err.print("e.g. scheduler show e:A:fire:0 or e:b:x:1")
    assert "e:A:fire:0 or e:b:x:1" in capsys.readouterr().err
