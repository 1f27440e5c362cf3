"""Bytes an agent leaves behind are never its outcome, through the CLI and real
workers: file names, output and transcripts that are not UTF-8 (or that carry
terminal escape sequences) are evidence to show, never a reason to record a run
as an infrastructure error, and never reach the reader's terminal as controls.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from core.results.run import RunStatus
from core.store import Store
from tests.conftest import SCHEDULER, StartWorker, run_cli
from tests.support.experiments import command_matrix
from tests.support.llm_stub import LLMStub, reply
from tests.support.terminal import in_terminal

pytestmark = pytest.mark.integration

# Even runs write the file their gate checks for, odd runs do not; every run leaves
# a file whose name is not UTF-8 and prints bytes that are not either.
NON_UTF8_AGENT = (
    "printf x > \"$(printf 'bad\\377name.txt')\"; "
    "mkdir \"$(printf 'dir\\300')\" && printf y > \"$(printf 'dir\\300/f\\376')\"; "
    "printf 'out \\377\\376 done\\n'; printf 'err \\300\\n' >&2; "
    "if [ $((EVALFLEET_RUN_INDEX % 2)) -eq 0 ]; then touch out.txt; fi"
)
JUDGMENT = {
    "scores": {"quality": 1.0},
    "reasons": {"quality": "fine"},
    "weighted_score": 1.0,
    "confidence": 0.9,
    "issues": [],
    "highlights": [],
}


def judged(matrix: Path, base_url: str) -> None:
    """command_matrix's scenario judged at `base_url` against a one-criterion rubric."""
    (matrix.parent / "rubric.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: q}]\n"
    )
    text = matrix.read_text().replace(
        "evaluation: {gates: ",
        "evaluation: {judge: {rubric: rubric.yaml, pass_threshold: 0.5}, gates: ",
    )
    judge = f'judge: {{base_url: "{base_url}", model: judge-model, api_key_env: null}}\n'
    matrix.write_text(text + judge)


@pytest.mark.parametrize("judge", [False, True], ids=["gates", "gates-and-judge"])
def test_non_utf8_file_names_and_output_leave_each_run_the_outcome_its_gates_give(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
    judge: bool,
) -> None:
    start_worker(concurrency=2)
    with LLMStub([reply(content=json.dumps(JUDGMENT))]) as stub:
        matrix = command_matrix(
            tmp_path, NON_UTF8_AGENT, runs=4, extra="workspace_archive: {keep: all}"
        )
        if judge:
            judged(matrix, stub.base_url)
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        prompts = [json.dumps(request.body) for request in stub.requests]
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]

    runs = store.results.all(exp_id)
    assert sorted(run.run_index for run in runs) == [0, 1, 2, 3]
    for run in runs:
        passes = run.run_index % 2 == 0
        outcome = (run.status, run.passed, run.gates_passed)
        assert outcome == (RunStatus.completed, passes, int(passes)), run.fail_reason
        if judge:
            assert run.judge is not None and run.judge.error is None, run.fail_reason
        else:
            assert run.judge is None
        evidence = store.evidence.get(exp_id, run.run_id)
        assert evidence is not None
        # The names are shown, their undecodable bytes escaped, not dropped.
        assert "added: bad\\xffname.txt (1 byte)" in evidence.changes_summary
        assert "added: dir\\xc0/f\\xfe (1 byte)" in evidence.changes_summary
        assert "+++ b/bad\\xffname.txt" in evidence.patch.text
        assert "out \ufffd\ufffd done" in evidence.stdout.text
        assert evidence.cuts == []  # nothing of it went missing
        assert store.workspaces.get(exp_id, run.run_id) is not None
    # The judge was shown the names too, escaped alike (runs alike share a judgment).
    assert bool(prompts) == judge
    assert all("bad\\\\xffname.txt" in prompt for prompt in prompts)


# Sequences that retitle the window, write a hyperlink and the clipboard, clear the
# screen and overwrite the line above; then BEL and a C1 CSI (U+009B) alone.
ESCAPES = (
    r"\033]0;owned\007 \033]8;;http://x.invalid\033\\link\033]8;;\033\\ "
    r"\033]52;c;Zm9v\007 \033[2J \033[1A\033[2K \007 \302\23331m"
)
SHOWN = (
    "\\x1b]0;owned\\x07 \\x1b]8;;http://x.invalid\\x1b\\link\\x1b]8;;\\x1b\\ "
    "\\x1b]52;c;Zm9v\\x07 \\x1b[2J \\x1b[1A\\x1b[2K \\x07 \\x9b31m"
)
# Agent text everywhere `show` prints it: stdout, stderr, a transcript message and
# command, a gate's output, a file name; the judge answers with sequences of its own.
EVENTS = (
    "import json, os, sys; text = sys.stdin.read(); "
    'events = [dict(type="message", role="assistant", text="say " + text), '
    'dict(type="tool_call", id="a", command="run " + text)]; '
    'open(os.environ["EVALFLEET_EVENTS"], "w")'
    '.write("".join(json.dumps(e) + "\\n" for e in events))'
)
LOUD_AGENT = (
    f"printf '{ESCAPES}\\n'; printf '{ESCAPES}\\n' >&2; "
    f"printf '{ESCAPES}' | python3 -c '{EVENTS}'; touch out.txt \"$(printf 'f\\033[2J')\""
)
LOUD_GATE = f"[{{type: command_succeeds, command: \"printf '{ESCAPES}'\"}}]".replace("\\", "\\\\")


def _inert(text: str) -> None:
    """Nothing a terminal obeys: no C0 control but newline and tab, no DEL, no C1."""
    controls = {
        hex(ord(c)) for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
    }
    assert controls == set()


def test_show_prints_what_an_agent_a_gate_and_a_judge_said_inert(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    answer = {**JUDGMENT, "reasons": {"quality": "\x1b]0;judge\x07 fine"}, "issues": ["\x1b[2J x"]}
    start_worker(concurrency=1)
    with LLMStub([reply(content=json.dumps(answer))]) as stub:
        matrix = command_matrix(tmp_path, LOUD_AGENT, gates=LOUD_GATE)
        judged(matrix, stub.base_url)
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]

    shown = run_cli("show", f"{exp_id}:T0:s:0", env={**fleet_env, "COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    _inert(shown.stdout)
    # Each text is there, its controls written out.
    sections = {
        "gate output": shown.stdout.split("$ printf")[1],
        "transcript message": shown.stdout.split("message: assistant: say ")[1],
        "transcript command": shown.stdout.split("$ run ")[1],
        "stdout": shown.stdout.split("\nstdout (")[1],
        "stderr": shown.stdout.split("\nstderr (")[1],
    }
    for name, section in sections.items():
        assert SHOWN in section, name
    assert "\\x1b]0;judge\\x07 fine" in shown.stdout
    assert "issue: \\x1b[2J x" in shown.stdout
    assert "added: f\\x1b[2J (0 bytes)" in shown.stdout


def test_the_table_report_prints_an_agents_error_inert(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """An agent that cannot start (exit 127) is an infrastructure error whose reason
    quotes its stderr, which the table report lists; three in a row stop the tier
    (fail-fast), which the worker's log says quoting the reason, inert too."""
    worker = start_worker(concurrency=1)
    matrix = command_matrix(tmp_path, f"printf '{ESCAPES}' >&2; exit 127", runs=3)
    result = run_cli("submit", str(matrix), "--json", "--wait", env=fleet_env)
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    _inert(result.stderr)
    logged = worker.log.read_text()
    _inert(logged)
    assert "tier T0 stopped: its first runs all failed with: " in logged, logged[-2000:]
    assert SHOWN.split(" ")[0] in logged  # the reason, its escapes written out

    env = {**fleet_env, "COLUMNS": "400"}
    brief = run_cli("report", exp_id, "--format", "table", env=env)
    assert brief.returncode == 0, brief.stderr
    _inert(brief.stdout)  # its failure reasons, cut to a line
    assert "infrastructure error: agent could not start (exit 127): " in brief.stdout
    table = run_cli("report", exp_id, "--format", "table", "--full", env=env)
    assert table.returncode == 0, table.stderr
    _inert(table.stdout)
    assert SHOWN in table.stdout
    # Markdown quotes the reason as it is: to a file or a pipe as rendered, to a
    # terminal inert (written as its escapes).
    piped = run_cli("report", exp_id, "--format", "markdown", env=env)
    assert piped.returncode == 0 and "\x1b]0;owned\x07" in piped.stdout
    shown = in_terminal([SCHEDULER, "report", exp_id, "--format", "markdown"], env, columns=400)
    _inert(shown.replace("\r\n", "\n"))
    assert "\\x1b]0;owned\\x07" in shown


# Characters that change what a text seems to say, unseen: U+202E shows the name
# `invoice\u202etxt.exe` as `invoiceexe.txt`; zero-width ones (and a joiner outside
# an emoji, a BOM, a soft hyphen) hide in a word. Beside them, text to keep as it is.
DISGUISED_NAME = "invoice\u202etxt.exe"
HIDDEN = "rm\u200b -rf\u2060 /\ufefftmp\u00ad pass\u200dword \u2066x\u2069"
HIDDEN_SHOWN = "rm\\u200b -rf\\u2060 /\\ufefftmp\\u00ad pass\\u200dword \\u2066x\\u2069"
LEGIBLE = "café 漢字 \U0001f469\u200d\U0001f4bb"
# Its source is ASCII (!a): the matrix's YAML reads a JSON escape of an emoji as
# two lone surrogates.
DISGUISING_AGENT = f"""\
import os, pathlib, sys
pathlib.Path({DISGUISED_NAME!a}).write_text("x")
pathlib.Path({"notes " + LEGIBLE + ".md"!a}).write_text("y")
said = ({HIDDEN!a} + " " + {LEGIBLE!a} + "\\n").encode()
sys.stdout.buffer.write(said)
sys.stderr.buffer.write(said)
# A failed run (its reason quotes stderr), then one whose agent "could not start": an
# infrastructure error, whose reason every report form lists.
sys.exit(127 if os.environ["EVALFLEET_RUN_INDEX"] == "1" else 1)
"""


def _undisguised(text: str) -> None:
    """No bidirectional control or invisible character, but the joiner of an emoji."""
    hidden = {hex(ord(c)) for c in text.replace("\U0001f469\u200d\U0001f4bb", "") if c in HIDDEN}
    assert hidden <= {hex(ord(c)) for c in "rm -rf/tmpasword x"}  # the visible letters
    assert "\u202e" not in text


def test_show_and_reports_write_out_what_would_disguise_a_name_or_a_line(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    matrix = command_matrix(tmp_path, f"python3 -c {shlex.quote(DISGUISING_AGENT)}", runs=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 3, result.stderr  # an infrastructure error, as meant
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    env = {**fleet_env, "COLUMNS": "400"}

    shown = run_cli("show", f"{exp_id}:T0:s:0", env=env)
    assert shown.returncode == 0, shown.stderr
    _undisguised(shown.stdout)
    assert "added: invoice\\u202etxt.exe (1 byte)" in shown.stdout
    assert f"added: notes {LEGIBLE}.md (1 byte)" in shown.stdout  # legible text stays
    assert f"{HIDDEN_SHOWN} {LEGIBLE}" in shown.stdout.split("\nstdout (")[1]
    assert f"{HIDDEN_SHOWN} {LEGIBLE}" in shown.stdout.split("\nstderr (")[1]
    # Where the output depends on a terminal: each form printed to one.
    for argv in (
        ["show", f"{exp_id}:T0:s:0", "--json"],  # the patch and the names, as JSON escapes
        ["report", exp_id],  # the table, its failure reasons quoting stderr
        ["report", exp_id, "--full"],
        ["report", exp_id, "--format", "markdown"],
        ["report", exp_id, "--format", "json", "--runs"],
    ):
        printed = in_terminal([SCHEDULER, *argv], env, columns=400)
        _undisguised(printed)
        assert "rm\\u200b -rf\\u2060" in printed, argv
    patch = in_terminal([SCHEDULER, "show", f"{exp_id}:T0:s:0", "--json"], env, columns=400)
    assert "+++ b/invoice\\u202etxt.exe" in patch
    # To a pipe, JSON is as stored: its readers get the characters themselves.
    piped = run_cli("show", f"{exp_id}:T0:s:0", "--json", env=env)
    assert "invoice\u202etxt.exe" in piped.stdout
