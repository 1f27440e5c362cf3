"""Layer 2 of llm-tool-test's evaluation: the nine generic gates, run against a workspace.

Gates run in declaration order and all of them run (no short-circuit). A gate
never raises: whatever goes wrong (a hung command, an unreadable file, a path
outside the workspace) is a failed GateResult whose message says why. Each gate
type's evaluator is registered here against its model in core.matrix.gates
(`evaluates`; a command gate's `judges_output`, whose command has run first), and
found by the gate's tag (docs/EXTENDING.md, "A gate").

Commands run through core.evaluation.shell: ``bash -c COMMAND`` in the workspace, in their
own process group, killed whole at the gate's ``timeout_s``. ``env`` is the complete
environment of gate commands (default: this process's environment). Given an
``Enclosure`` (the agent's container, `sandbox: docker`), command gates run in it
unless they say ``where: host``; file gates read the same workspace either way.

``command_json_path``: stdout is parsed as JSON and the JSONPath applied
(jsonpath_ng.ext). The assertion sees ``found`` = at least one match and as
value the match's value when there is exactly one, else the list of all matched
values (so ``$.notes[*].title`` with ``len >= 3`` counts the titles).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from jsonpath_ng.ext import parse as parse_jsonpath

from core.evaluation.credentials import RunAs
from core.evaluation.shell import ShellResult, run_shell
from core.evidence.models import Excerpt, GateEvidence
from core.matrix import (
    CommandGate,
    CommandJsonPath,
    CommandOutputContains,
    CommandOutputMatches,
    CommandSucceeds,
    FileContains,
    FileExists,
    FileMatches,
    Gate,
    GateModel,
    NoTranscriptErrors,
    Script,
    gate_tag,
)
from core.registry import Registry
from core.results.run import GateResult
from core.results.transcript import CommandRecord

MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # per stream: room for a large `list --format json`
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_LISTED_FAILURES = 5


@dataclass(frozen=True)
class Enclosure:
    """Where command gates run instead of as this process: the argv that goes before
    `bash -c COMMAND` (the agent's container; gates that say `where: host` run
    without it) and the environment of that argv's process; `user`, the run's own
    user (worker.confinement), whichever: the gates run what the agent left in its
    workspace, which must not run with the worker's rights."""

    argv_prefix: Sequence[str]
    env: Mapping[str, str]
    user: RunAs | None = None


@dataclass(frozen=True)
class GateRun:
    """A gate's verdict and what it ran and saw (the run's evidence)."""

    result: GateResult
    evidence: GateEvidence


def gate_runs(
    gates: Sequence[Gate],
    workspace: Path,
    *,
    target_commands: Sequence[CommandRecord],
    env: Mapping[str, str] | None = None,
    enclosure: Enclosure | None = None,
) -> list[GateRun]:
    """Evaluate every gate in order; one GateRun each."""
    run = _Run(workspace, target_commands, env, enclosure)
    return [_run_gate(gate, run) for gate in gates]


def run_gates(
    gates: Sequence[Gate],
    workspace: Path,
    *,
    target_commands: Sequence[CommandRecord],
    env: Mapping[str, str] | None = None,
    enclosure: Enclosure | None = None,
) -> list[GateResult]:
    """The verdicts alone, when the evidence is not wanted."""
    runs = gate_runs(
        gates, workspace, target_commands=target_commands, env=env, enclosure=enclosure
    )
    return [run.result for run in runs]


@dataclass(frozen=True)
class _Verdict:
    passed: bool
    message: str
    details: Any = None
    out: ShellResult | None = None  # a command gate's command, as it ended


@dataclass(frozen=True)
class _Run:
    """What a gate is evaluated against: the finished run and where commands run."""

    workspace: Path
    target_commands: Sequence[CommandRecord]
    env: Mapping[str, str] | None
    enclosure: Enclosure | None


# Gate tag -> its evaluator, registered beside it below (`evaluates`, `judges_output`)
# against the model core.matrix.gates registered.
EVALUATORS: Registry[Callable[[Any, _Run], _Verdict]] = Registry("gate evaluator")
M = TypeVar("M", bound=GateModel)
C = TypeVar("C", bound=CommandGate)


def evaluates(
    model: type[M],
) -> Callable[[Callable[[M, _Run], _Verdict]], Callable[[M, _Run], _Verdict]]:
    """Registers how a gate of type `model` is evaluated."""

    def register(evaluate: Callable[[M, _Run], _Verdict]) -> Callable[[M, _Run], _Verdict]:
        EVALUATORS.add(gate_tag(model), evaluate)
        return evaluate

    return register


def judges_output(
    model: type[C],
) -> Callable[[Callable[[C, ShellResult], _Verdict]], Callable[[C, ShellResult], _Verdict]]:
    """Registers how a command gate's command, once run to its end, is judged: one that
    could not run or timed out has failed before its judge is asked."""

    def register(
        judge: Callable[[C, ShellResult], _Verdict],
    ) -> Callable[[C, ShellResult], _Verdict]:
        def evaluate(gate: C, run: _Run) -> _Verdict:
            out = _run_command(gate, run)
            if out.error is not None:
                verdict = _Verdict(False, f"could not run command: {out.error}")
            elif out.timed_out:
                verdict = _Verdict(False, f"timed out after {gate.timeout_s:g} s")
            else:
                verdict = judge(gate, out)
            return replace(verdict, out=out)

        EVALUATORS.add(gate_tag(model), evaluate)
        return judge

    return register


def _run_gate(gate: Gate, run: _Run) -> GateRun:
    started = time.monotonic()
    try:
        verdict = EVALUATORS[gate.type](gate, run)
    except Exception as exc:  # a gate must never take the run down with it
        verdict = _Verdict(False, f"gate could not be evaluated: {type(exc).__name__}: {exc}")
    result = GateResult(
        gate_type=gate.type,
        name=gate.name,
        passed=verdict.passed,
        message=verdict.message,
        duration_s=round(time.monotonic() - started, 3),
        details=verdict.details,
    )
    return GateRun(result, _evidence(gate, verdict.out))


def _evidence(gate: Gate, out: ShellResult | None) -> GateEvidence:
    """The command and its whole captured output (bounded later, with the rest of the
    run's evidence)."""
    command = gate.command if isinstance(gate, CommandGate) else None
    if out is None:
        return GateEvidence(command=command)
    return command_evidence(command, out)


def command_evidence(command: str | None, out: ShellResult) -> GateEvidence:
    """What a command ran to check a run (a gate, a task's verifier) left: its exit, its
    stdout, then its stderr under a line that says so."""
    text = out.stdout
    if out.stderr:
        text += ("" if text.endswith("\n") or not text else "\n") + f"--- stderr ---\n{out.stderr}"
    if out.error is not None:
        text += f"\ncould not run command: {out.error}"
    return GateEvidence(
        command=command,
        exit_code=out.exit_code,
        output=Excerpt.whole(text),
    )


def _run_command(gate: CommandGate, run: _Run) -> ShellResult:
    env, enclosure = run.env, run.enclosure
    prefix: Sequence[str] = ()
    if enclosure is not None and gate.where == "container" and enclosure.argv_prefix:
        env, prefix = enclosure.env, enclosure.argv_prefix
    user = enclosure.user if enclosure is not None else None
    out = run_shell(
        gate.command,
        run.workspace,
        timeout_s=gate.timeout_s,
        env=env,
        max_output_bytes=MAX_OUTPUT_BYTES,
        argv_prefix=prefix,
        user=user,
    )
    if user is not None:
        # Nothing a gate started outlives it: the agent's code a gate ran (an import, a
        # test) could leave a process of its own session that changes the workspace
        # under the next gate, the judge and the evidence, after this one passed.
        user.kill_all()
    return out


# --- command output ---------------------------------------------------------------------


def _tail(text: str, limit: int = 200) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _exit_summary(out: ShellResult) -> str:
    if out.exit_code == 0:
        return "exit code 0"
    stderr = _tail(out.stderr)
    return f"exit code {out.exit_code}" + (f": {stderr}" if stderr else "")


def _with_exit(message: str, out: ShellResult, passed: bool) -> str:
    """A failed output check also says how the command ended, often the real cause."""
    if passed or out.exit_code == 0:
        return message
    return f"{message} ({_exit_summary(out)})"


@judges_output(CommandSucceeds)
def _command_succeeds(gate: CommandSucceeds, out: ShellResult) -> _Verdict:
    return _Verdict(out.exit_code == 0, _exit_summary(out))


@judges_output(CommandOutputContains)
def _output_contains(gate: CommandOutputContains, out: ShellResult) -> _Verdict:
    ok = gate.substring in out.stdout
    said = "contains" if ok else "does not contain"
    return _Verdict(ok, _with_exit(f"stdout {said} {gate.substring!r}", out, ok))


@judges_output(CommandOutputMatches)
def _output_matches(gate: CommandOutputMatches, out: ShellResult) -> _Verdict:
    ok = re.search(gate.pattern, out.stdout, re.MULTILINE) is not None
    said = "matches" if ok else "does not match"
    return _Verdict(ok, _with_exit(f"stdout {said} /{gate.pattern}/", out, ok))


@judges_output(CommandJsonPath)
def _json_path(gate: CommandJsonPath, out: ShellResult) -> _Verdict:
    if not out.stdout.strip():
        return _Verdict(False, _with_exit("stdout is empty, expected JSON", out, False))
    try:
        document = json.loads(out.stdout)
    # JSONDecodeError, a number too long to convert, or nesting too deep to decode.
    except (ValueError, RecursionError) as exc:
        cut = f" (output over {MAX_OUTPUT_BYTES} bytes was cut)" if out.truncated else ""
        head = out.stdout.strip()[:80]
        return _Verdict(
            False, _with_exit(f"stdout is not JSON{cut}: {exc}; starts {head!r}", out, False)
        )
    values = [match.value for match in parse_jsonpath(gate.path).find(document)]
    value = values[0] if len(values) == 1 else values
    ok, message = gate.parsed_assertion.check(bool(values), value)
    return _Verdict(ok, f"{gate.path}: {message}")


@judges_output(Script)
def _script(gate: Script, out: ShellResult) -> _Verdict:
    label = gate.description or "script"
    return _Verdict(out.exit_code == 0, f"{label}: {_exit_summary(out)}", _json_from(out.stdout))


def _json_from(stdout: str) -> Any:
    """The JSON a script printed: its whole stdout, or else its last non-empty line."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    for candidate in (stdout, lines[-1] if lines else ""):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return None


# --- transcript ---------------------------------------------------------------------------


@evaluates(NoTranscriptErrors)
def _no_transcript_errors(gate: NoTranscriptErrors, run: _Run) -> _Verdict:
    commands = run.target_commands
    if not commands:
        # "No errors" among no commands is vacuous: it would give credit to an
        # agent that did nothing (README, "Gates that check nothing").
        return _Verdict(False, "no target commands in the transcript: nothing to check")
    failed = [c for c in commands if c.exit_code not in (None, 0)]
    if not failed:
        return _Verdict(True, f"no failed target commands ({len(commands)} checked)")
    listed = "; ".join(
        f"{_clip(c.command)} (exit {c.exit_code})" for c in failed[:MAX_LISTED_FAILURES]
    )
    more = len(failed) - MAX_LISTED_FAILURES
    suffix = f"; and {more} more" if more > 0 else ""
    return _Verdict(
        False, f"{len(failed)} of {len(commands)} target commands failed: {listed}{suffix}"
    )


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- files ------------------------------------------------------------------------------


@evaluates(FileExists)
def _file_exists(gate: FileExists, run: _Run) -> _Verdict:
    path, refusal = _inside(run.workspace, gate.path)
    if refusal is not None:
        return _Verdict(False, refusal)
    kind = "directory" if path.is_dir() else "file"
    ok = path.exists()
    return _Verdict(ok, f"{kind} {gate.path!r} exists" if ok else f"{gate.path!r} does not exist")


@evaluates(FileContains)
def _file_contains(gate: FileContains, run: _Run) -> _Verdict:
    text = _file_text(run.workspace, gate.path)
    if isinstance(text, _Verdict):
        return text
    ok = gate.substring in text
    said = "contains" if ok else "does not contain"
    return _Verdict(ok, f"{gate.path!r} {said} {gate.substring!r}")


@evaluates(FileMatches)
def _file_matches(gate: FileMatches, run: _Run) -> _Verdict:
    text = _file_text(run.workspace, gate.path)
    if isinstance(text, _Verdict):
        return text
    ok = re.search(gate.pattern, text, re.MULTILINE) is not None
    return _Verdict(ok, f"{gate.path!r} {'matches' if ok else 'does not match'} /{gate.pattern}/")


def _file_text(workspace: Path, relative: str) -> str | _Verdict:
    """The file's text (its first MAX_FILE_BYTES), or the failed verdict saying why not."""
    path, refusal = _inside(workspace, relative)
    if refusal is not None:
        return _Verdict(False, refusal)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        return _Verdict(False, f"{relative!r} {what}")
    with path.open("rb") as fh:
        return fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")


def _inside(workspace: Path, relative: str) -> tuple[Path, str | None]:
    """The path inside the workspace, or a refusal: gates must not read the host."""
    if Path(relative).is_absolute():
        return Path(), f"path {relative!r} is absolute; gate paths are relative to the workspace"
    root = workspace.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        return Path(), f"path {relative!r} resolves outside the workspace; refused"
    return path, None
