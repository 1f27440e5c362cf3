"""`scheduler show RUN`: one run in the terminal, in the order a reader asks about it:
its outcome and why, then its gates (command, exit code, output), a benchmark
task's verifier (rewards, command, output), the judge's
scores and reasons, a compact transcript (LLM calls with tokens, tool calls with
exit codes, messages), the tails of stdout and stderr, and every delivery.

Everything shown comes from the stored RunResult and RunEvidence (core.evidence.models);
the agent's own text is printed as text, never read as rich markup, and with its
control characters made visible (core.evidence.text.visible): an escape sequence
an agent, a gate or a judge printed is shown, never obeyed by the terminal.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from core.evidence.models import Attempt, Excerpt, GateEvidence, JudgeEvidence, RunRecord
from core.evidence.text import each_text, visible
from core.results.run import NOT_RUN_NOTE, GateResult, JudgeResult, RunResult, RunStatus
from core.wording import plural
from scheduler.report.formatting import duration

# Lines of a text shown in the terminal (the whole stored text: --json).
TAIL_LINES = 40
OUTPUT_LINES = 20
EVENT_LINES = 80


def render_run(
    record: RunRecord,
    run_id: str,
    width: int,
    note: str | None = None,
    *,
    scoring: str | None = None,
    first: RunResult | None = None,
) -> str:
    """`note`: why the evidence could not be read here, if it could not; `scoring`: which
    report version's result this is, said under the outcome; `first`: the run as it
    ran, when the result is a later version's. The evidence holds what its first
    scoring's gates printed and what each of its judgments answered: shown beside a
    later version's result only where that version's gates (judge) gave the same."""
    console = Console(
        file=io.StringIO(), width=width, highlight=False, soft_wrap=False, emoji=False
    )
    record = RunRecord.model_validate(each_text(record.model_dump(), visible))
    result, evidence = record.result, record.evidence
    _outcome(console, run_id, result)
    if scoring is not None:
        console.print(visible(scoring), markup=False, soft_wrap=True)
    if note is not None:
        console.print(f"[yellow]note:[/yellow] {escape(visible(note))}")
    elif evidence is None and result is not None:
        console.print(
            "[yellow]note:[/yellow] no evidence stored for this run (it ran before evidence "
            "was kept, or its evidence could not be stored: see the worker's log)"
        )
    if result is not None and result.gates:
        outputs = evidence.gates if evidence is not None else []
        if first is not None and _verdicts(result.gates) != _verdicts(first.gates):
            withheld = any(seen.command is not None for seen in outputs)
            outputs = []
        else:
            withheld = False
        _gates(console, result.gates, outputs)
        if withheld:
            console.print(
                "(the gates' commands and output are stored as the run first ran its gates, "
                "which gave other results: `--version 1` shows them)",
                markup=False,
                style="dim",
            )
    if evidence is not None and evidence.verifier is not None and result is not None:
        _verifier(console, result, evidence.verifier)
    if result is not None and result.judge is not None:
        judged = evidence.judge if evidence is not None else None
        if first is not None and judged is not None and result.judge != first.judge:
            # Each judgment's answer is its first judging's, not this version's.
            judged = None
        _judge(console, result.judge, judged)
    if evidence is not None:
        if evidence.events:
            _section(console, "Transcript")
            _lines(console, [_event_line(e) for e in evidence.events], EVENT_LINES)
        if evidence.changes_summary:
            _section(console, "Workspace changes")
            console.print(evidence.changes_summary, markup=False)
            if evidence.patch.text:
                console.print(
                    f"patch: {plural(len(evidence.patch.text.splitlines()), 'line')} "
                    "(--json shows it)",
                    style="dim",
                )
        for name in ("stdout", "stderr"):
            _tail(console, name, getattr(evidence, name))
        if evidence.phases:
            phases = ", ".join(f"{p} {duration(s)}" for p, s in evidence.phases.items())
            console.print(f"\nphases: {phases}", markup=False)
    _attempts(console, record.attempts)
    if evidence is not None and evidence.cuts:
        _section(console, "Cut to fit the caps")
        for cut in evidence.cuts:
            console.print(f"- {cut}", markup=False)
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


def _outcome(console: Console, run_id: str, result: RunResult | None) -> None:
    console.print(f"[bold]run {escape(run_id)}[/bold]")
    if result is None:
        console.print("[yellow]no result yet[/yellow]: still queued or running, or lost")
        return
    if result.status.counted:
        verdict = "[green]passed[/green]" if result.passed else "[red]failed[/red]"
    else:  # neither a pass nor a failure of its agent's
        verdict = "[yellow]not counted[/yellow] in the statistics"
    console.print(f"outcome: [bold]{result.status.value}[/bold], {verdict}")
    if result.fail_reason:
        console.print(f"reason: {escape(result.fail_reason)}")
    facts = [f"tier {result.tier}", f"scenario {result.scenario}", f"index {result.run_index}"]
    stopped = (result.fail_reason or "").endswith(NOT_RUN_NOTE)  # by fail-fast, unstarted
    if result.status in (RunStatus.cancelled, RunStatus.not_run) or stopped:
        # Its time would be the recording's, its cost none of its agent's: the reason
        # says whether an agent had begun.
        facts.append("no agent result")
    else:
        facts += [
            f"agent {duration(result.duration_seconds)}",
            f"{result.input_tokens} in / {result.output_tokens} out tokens",
            "cost unknown" if result.cost_usd is None else f"${result.cost_usd:.4f}",
            f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code",
        ]
    if result.worker:
        facts.append(f"worker {result.worker}")
    console.print(" · ".join(facts), markup=False, style="dim")
    if result.cost_usd is None and result.cost_unknown_reason:
        console.print(f"cost unknown: {result.cost_unknown_reason}", markup=False, soft_wrap=True)
    if result.kept_folder:
        console.print(
            f"folder kept (--keep-workspaces): {result.kept_folder}", markup=False, soft_wrap=True
        )


def _verdicts(gates: list[GateResult]) -> list[tuple[str, str | None, bool, str]]:
    """What each gate said, without its time: what a later version must say alike for
    the first scoring's output to stand beside it."""
    return [(g.gate_type, g.name, g.passed, g.message) for g in gates]


def _section(console: Console, title: str) -> None:
    console.print()
    console.print(f"[bold underline]{title}[/bold underline]")


def _gates(console: Console, gates: list[GateResult], outputs: list[GateEvidence]) -> None:
    passed = sum(g.passed for g in gates)
    _section(console, f"Gates ({passed} of {len(gates)} passed)")
    for index, gate in enumerate(gates):
        mark = "[green]pass[/green]" if gate.passed else "[red]FAIL[/red]"
        console.print(f"{mark} {escape(gate.name or gate.gate_type)}: {escape(gate.message)}")
        seen = outputs[index] if index < len(outputs) else None
        if seen is not None and seen.command is not None:
            _command(console, seen)


def _verifier(console: Console, result: RunResult, seen: GateEvidence) -> None:
    """A benchmark task's verifier: its rewards (none when it gave none: the reason says
    why), its command and its output."""
    rewards = ", ".join(f"{name} {value:g}" for name, value in result.rewards.items())
    _section(console, f"Verifier: {rewards or 'no rewards'}")
    if seen.command is not None:
        _command(console, seen)


def _command(console: Console, seen: GateEvidence) -> None:
    """The command, its exit code and its output's last OUTPUT_LINES lines, after a
    line saying how many came before them."""
    code = "no exit code" if seen.exit_code is None else f"exit {seen.exit_code}"
    console.print(f"  $ {seen.command}  [{code}]", markup=False)
    lines, earlier = _last_lines(seen.output, OUTPUT_LINES)
    if earlier:
        lines = [f"[... {plural(earlier, 'earlier line')}: --json shows them ...]", *lines]
    _lines(console, lines, None, indent="    ")


def _judge(console: Console, judge: JudgeResult, evidence: JudgeEvidence | None) -> None:
    score = "no score" if judge.weighted_score is None else f"{judge.weighted_score:.2f}"
    verdict = "passed" if judge.passed else "failed"
    spread = ""
    if len(judge.scores) > 1:
        sd = "" if judge.scores_sd is None else f", SD {judge.scores_sd:.2f}"
        spread = f" (mean of {len(judge.scores)} judgments{sd})"
    _section(
        console, f"Judge ({judge.model}): {score}{spread} vs {judge.pass_threshold:.2f}, {verdict}"
    )
    if judge.error:
        console.print(f"[red]error:[/red] {escape(judge.error)}")
    calls = evidence.calls if evidence is not None else []
    if len(calls) > 1:
        # Each judgment with its own scores and reasons: a reason read beside another
        # judgment's score would explain a number it never gave.
        for number, call in enumerate(calls, 1):
            given = "no score" if call.weighted_score is None else f"{call.weighted_score:.2f}"
            cached = " (from the cache)" if call.cached else ""
            console.print(f"judgment {number} of {len(calls)}: {given}{cached}", markup=False)
            if call.error:
                console.print(f"  [red]error:[/red] {escape(call.error)}")
            _criteria(console, call.scores, call.reasons)
    elif judge.response is not None:
        reasons = judge.response.reasons or (calls[0].reasons if calls else {})
        _criteria(console, judge.response.scores, reasons)
    if judge.response is not None:
        for label, items in (("issue", judge.response.issues), ("good", judge.response.highlights)):
            for item in items:
                console.print(f"  {label}: {item}", markup=False)


def _criteria(console: Console, scores: dict[str, float], reasons: dict[str, str]) -> None:
    if not scores:
        return
    table = Table(show_edge=False, box=None, pad_edge=False)
    table.add_column("criterion")
    table.add_column("score", justify="right")
    table.add_column("reason", overflow="fold")
    for criterion, value in scores.items():
        table.add_row(criterion, f"{value:.2f}", escape(reasons.get(criterion, "")))
    console.print(table)


def _event_line(event: dict[str, Any]) -> str:
    kind = event.get("type")
    if kind == "llm_call":
        calls = event.get("tool_calls", 0)
        extra = f", {calls} tool call{'s' if calls != 1 else ''}" if calls else ""
        return (
            f"LLM call: {event.get('input_tokens', 0)} in / "
            f"{event.get('output_tokens', 0)} out tokens{extra}"
        )
    if kind == "tool_call":
        code = event.get("exit_code")
        return f"  $ {event.get('command', '')}  [{'exit ?' if code is None else f'exit {code}'}]"
    if kind == "message":
        return f"message: {event.get('text', '')}"
    if kind == "cut":
        return f"[... {event.get('events', 0)} events left out ...]"
    return str(event)


def _tail(console: Console, name: str, excerpt: Excerpt) -> None:
    if not excerpt.text:
        return
    lines, earlier = _last_lines(excerpt, TAIL_LINES)
    size = plural(excerpt.total_bytes, "byte")
    if earlier or excerpt.cut:
        last = "last " if earlier else ""
        _section(console, f"{name} ({last}{plural(len(lines), 'line')} shown of {size})")
    else:
        _section(console, f"{name} ({plural(len(lines), 'line')}, {size})")
    _lines(console, lines, None)


def _last_lines(excerpt: Excerpt, count: int) -> tuple[list[str], int]:
    """The last `count` lines of `excerpt`, and how many came before them."""
    stored = excerpt.text.rstrip("\n").splitlines() if excerpt.text else []
    return stored[-count:], max(0, len(stored) - count)


def _lines(console: Console, lines: list[str], limit: int | None, indent: str = "") -> None:
    """Each line as text; beyond `limit`, the first and last halves and a count."""
    shown: Iterable[str] = lines
    if limit is not None and len(lines) > limit:
        half = limit // 2
        skipped = f"[... {len(lines) - 2 * half} more lines: --json shows all ...]"
        shown = [*lines[:half], skipped, *lines[-half:]]
    for line in shown:
        console.print(indent + line, markup=False, overflow="fold")


def _attempts(console: Console, attempts: list[Attempt]) -> None:
    if not attempts:
        return
    _section(console, f"Deliveries ({len(attempts)})")
    table = Table(show_edge=False, box=None, pad_edge=False)
    for column in ("#", "worker", "started (UTC)", "seconds", "outcome"):
        table.add_column(column, overflow="fold")
    for number, attempt in enumerate(attempts, 1):
        seconds = (
            f"{attempt.ended_at - attempt.started_at:.1f}" if attempt.ended_at is not None else "-"
        )
        table.add_row(
            str(number),
            escape(attempt.worker),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(attempt.started_at)),
            seconds,
            escape(attempt.outcome),
        )
    console.print(table)
