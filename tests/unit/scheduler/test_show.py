"""scheduler.show: what `scheduler show` prints of a run."""

from __future__ import annotations

from core.evidence.models import Excerpt, GateEvidence, RunEvidence, RunRecord
from core.results.run import GateResult, RunResult, RunSpec, RunStatus
from scheduler.show import OUTPUT_LINES, render_run


def test_a_gates_long_output_shows_its_last_lines_and_says_how_many_came_before() -> None:
    spec = RunSpec(experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0)
    lines = [f"line {i}" for i in range(OUTPUT_LINES + 10)]
    gate = GateResult(gate_type="command_succeeds", passed=False, message="exit 1")
    output = Excerpt.whole("\n".join(lines) + "\n")
    record = RunRecord(
        result=RunResult.of(spec, RunStatus.completed, gates=[gate]),
        evidence=RunEvidence(
            experiment_id="e",
            run_id=spec.run_id,
            gates=[GateEvidence(command="env", exit_code=1, output=output)],
        ),
    )
    shown = render_run(record, spec.run_id, width=120)
    assert "[... 10 earlier lines: --json shows them ...]" in shown
    assert f"line {OUTPUT_LINES + 9}" in shown and "line 10\n" in shown
    assert "line 9\n" not in shown


def test_a_gates_short_output_is_shown_whole_without_a_note() -> None:
    spec = RunSpec(experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0)
    gate = GateResult(gate_type="command_succeeds", passed=True, message="exit 0")
    record = RunRecord(
        result=RunResult.of(spec, RunStatus.completed, gates=[gate]),
        evidence=RunEvidence(
            experiment_id="e",
            run_id=spec.run_id,
            gates=[GateEvidence(command="env", exit_code=0, output=Excerpt.whole("a\nb\n"))],
        ),
    )
    shown = render_run(record, spec.run_id, width=120)
    assert "    a\n    b\n" in shown and "earlier line" not in shown
