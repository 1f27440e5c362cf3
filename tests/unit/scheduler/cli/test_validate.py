"""`scheduler validate` and `scheduler schema`, run as a user runs them."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from tests.conftest import EXAMPLES, run_cli

GOOD = """\
name: demo
runs_per_tier: 3
agent: {kind: command, command: "echo hi", model: claude-sonnet-4}
tiers:
  - id: T0
  - id: T1
    files: {AGENTS.md: guide.md}
scenarios:
  - id: s1
    prompt: "do it"
    target: {command_pattern: 'my-tool\\s+(\\S+)'}
    evaluation:
      gates:
        - type: command_json_path
          command: "my-tool list"
          path: "$.items[0]"
          assertion: "len >= 3"
        - {type: file_exists, path: out.txt}
      judge: {rubric: rubric.yaml, pass_threshold: 0.7}
judge: {model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
"""

# GOOD's scenario is judged: without its judge key set a matrix is refused.
KEYED = {**os.environ, "OPENAI_API_KEY": "sk-test-validate"}

RUBRIC = "criteria:\n  - {id: done, weight: 1.0, description: finished}\n"

# The closing line of problems found before the matrix read into its model.
UNREAD = " Once it reads, its commands, files and API keys are checked too."


def write(tmp_path: Path, text: str, rubric: str = RUBRIC) -> Path:
    (tmp_path / "guide.md").write_text("guidance")
    (tmp_path / "rubric.yaml").write_text(rubric)
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str, rubric: str = RUBRIC) -> list[str]:
    """The lines `validate` says of the matrix `text`, which it refuses (exit 2)."""
    result = run_cli("validate", str(write(tmp_path, text, rubric)), env=KEYED)
    assert result.returncode == 2, result.stdout
    return result.stderr.splitlines()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("  - id: T1\n", "  - id: T0\n"),
            "matrix.yaml:6:9: tiers.1.id: duplicate tier id 'T0'; each must be unique",
        ),
        (
            ("tiers:\n", "baseline: T9\ntiers:\n"),
            "matrix.yaml:4:11: baseline: baseline 'T9' is not a tier; tiers are ['T0', 'T1']",
        ),
        (
            ("judge: {model: gpt-4o-mini", "judge: {model: claude-sonnet-4"),
            "matrix.yaml:20:16: judge.model: judge model 'claude-sonnet-4' is the model under "
            "test in tier 'T0'",
        ),
    ],
)
def test_a_check_across_keys_is_placed_at_the_key_to_change(
    tmp_path: Path, change: tuple[str, str], said: str
) -> None:
    """Not at the matrix's first line, and without sending the user to the schema, which
    has nothing to say about a value that is well typed."""
    result = run_cli("validate", str(write(tmp_path, GOOD.replace(*change))), env=KEYED)
    assert result.returncode == 2
    assert f"error: {tmp_path / said}" in result.stderr
    assert result.stderr.splitlines()[-1] == "1 problem(s); nothing was started." + UNREAD


def test_every_check_across_keys_that_fails_is_said_at_once_in_the_files_order(
    tmp_path: Path,
) -> None:
    """A model validator ends at its first error: five mistakes took five runs of
    `validate` to see. Each is placed, and a tier's agent that is invalid once the
    matrix agent's keys are merged in is said in a sentence, not as pydantic's dump."""
    many = """\
name: demo
runs_per_tier: 3
agent: {kind: command, command: "echo hi", model: claude-sonnet-4}
baseline: T9
tiers:
  - id: T0
  - id: T0
  - id: T2
    agent: {kind: openai}
scenarios:
  - id: s1
    prompt: "do it"
    evaluation: {judge: {rubric: rubric.yaml}}
  - {id: s1, prompt: again}
judge: {model: claude-sonnet-4, api_key_env: OPENAI_API_KEY}
"""
    matrix = tmp_path / "matrix.yaml"
    assert refused(tmp_path, many) == [
        f"error: {matrix}:4:11: baseline: baseline 'T9' is not a tier; tiers are ['T0', 'T2']",
        f"error: {matrix}:7:9: tiers.1.id: duplicate tier id 'T0'; each must be unique",
        f"error: {matrix}:9:12: tiers.2.agent: tier 'T2': its agent (the matrix agent with "
        "this tier's keys over it) is invalid: agent kind 'openai' needs `base_url` and "
        "`model`",
        f"error: {matrix}:14:10: scenarios.1.id: duplicate scenario id 's1'; each must be unique",
        f"error: {matrix}:15:16: judge.model: judge model 'claude-sonnet-4' is the model under "
        "test in tier 'T0'; use another judge model or set judge.allow_self_judge: true",
        "5 problem(s); nothing was started." + UNREAD,
    ]


def test_the_ids_are_checked_beside_a_keys_error_not_after_it(tmp_path: Path) -> None:
    """A mistyped key ended validation before the duplicate ids and the baseline were
    looked at: one more run of `validate` each. They need no valid model."""
    matrix = """\
name: demo
runs_per_tier: 3
baseline: T9
agent: {kind: command, command: "echo hi"}
tiers:
  - id: T0
  - {id: T0, preset: claude-code}
scenarios:
  - {id: s1, prompt: go, promt: x}
  - {id: s1, prompt: again}
"""
    path = tmp_path / "matrix.yaml"
    assert refused(tmp_path, matrix)[:-1] == [
        f"error: {path}:3:11: baseline: baseline 'T9' is not a tier; tiers are ['T0']",
        f"error: {path}:7:10: tiers.1.id: duplicate tier id 'T0'; each must be unique",
        f"error: {path}:7:22: tiers.1.preset: unknown key; `preset` belongs under `agent:` "
        "(`scheduler schema` lists every key)",
        f"error: {path}:9:33: scenarios.0.promt: unknown key; did you mean `prompt` or "
        "`prompt_file`? (`scheduler schema` lists every key)",
        f"error: {path}:10:10: scenarios.1.id: duplicate scenario id 's1'; each must be unique",
    ]
    # Beside an error of any type (an empty path's once ended in a traceback).
    empty = matrix.replace("{id: T0, preset: claude-code}", "{id: T0, files: {AGENTS.md: }}")
    assert refused(tmp_path, empty)[1:3] == [
        f"error: {path}:7:10: tiers.1.id: duplicate tier id 'T0'; each must be unique",
        f"error: {path}:7:32: tiers.1.files.AGENTS.md: Input is not a valid path for <class "
        "'pathlib.Path'>",
    ]


def test_a_rubrics_problems_are_said_with_the_matrixs_not_instead_of_them(
    tmp_path: Path,
) -> None:
    """A rubric that failed to read ended the matrix's validation: its problems first,
    the matrix's on the next run of `validate`. Now both, the rubric's once though two
    scenarios name it."""
    matrix = """\
name: demo
runs_per_tier: 3
agent: {kind: command, command: "echo hi"}
tiers: [{id: T0}, {id: T0}]
scenarios:
  - {id: s1, prompt: go, evaluation: {judge: {rubric: rubric.yaml}}}
  - {id: s2, prompt: again, evaluation: {judge: {rubric: rubric.yaml}}}
judge: {model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
"""
    rubric = "criteria:\n  - {id: done, weight: 0, description: finished}\n"
    assert refused(tmp_path, matrix, rubric) == [
        f"error: {tmp_path / 'rubric.yaml'}:2:24: criteria.0.weight: Input should be greater "
        "than 0",
        f"error: {tmp_path / 'matrix.yaml'}:4:24: tiers.1.id: duplicate tier id 'T0'; each "
        "must be unique",
        "2 problem(s); nothing was started. `scheduler schema` prints every accepted key." + UNREAD,
    ]


def test_a_judge_url_without_its_scheme_is_refused_before_any_agent_runs(tmp_path: Path) -> None:
    """httpx refuses `127.0.0.1:8765/v1` only when the first run is judged, after every
    agent has run and spent; `rejudge` reuses the stored URL, so nothing mends it."""
    bare = GOOD.replace(
        "judge: {model: gpt-4o-mini", 'judge: {base_url: "127.0.0.1:8765/v1", model: gpt-4o-mini'
    )
    result = run_cli("validate", str(write(tmp_path, bare)), env=KEYED)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {tmp_path / 'matrix.yaml'}:20:19: judge.base_url: '127.0.0.1:8765/v1' is not "
        "an http(s) URL: give its scheme and host, as in http://127.0.0.1:8000/v1 or "
        "https://api.openai.com/v1"
    )
    # Nor a URL httpx would refuse or misread later, nor one that carries a secret (it
    # is printed, stored and shown).
    for url, said in (
        (" http://127.0.0.1:8765/v1", "has a space in it: remove it"),
        ("http://127.0.0.1:99999/v1", "its port is not a port (1-65535)"),
        ("https://user:pw@api.example.com/v1", "'https://…@api.example.com/v1' carries "
         "credentials: give the key in the variable `api_key_env` names instead"),
    ):  # fmt: skip
        given = GOOD.replace(
            "judge: {model: gpt-4o-mini", f'judge: {{base_url: "{url}", model: gpt-4o-mini'
        )
        refused = run_cli("validate", str(write(tmp_path, given)), env=KEYED)
        assert refused.returncode == 2 and said in " ".join(refused.stderr.split()), refused.stderr
        assert "user:pw" not in refused.stderr + refused.stdout


def test_a_key_given_twice_is_an_error_at_its_second_place(tmp_path: Path) -> None:
    """YAML keeps a repeated key's last value without a word: `runs_per_tier: 0` eight
    lines below a `runs_per_tier: 3` was taken, and its error pointed at the 3."""
    twice = GOOD.replace("  - id: s1\n", "  - id: s1\n    id: s2\n") + "runs_per_tier: 0\n"
    matrix = tmp_path / "matrix.yaml"
    assert refused(tmp_path, twice) == [
        f"error: {matrix}:10:5: id: given twice (first at line 9); YAML would keep this one "
        "and ignore the first without a word: remove one",
        f"error: {matrix}:22:1: runs_per_tier: given twice (first at line 2); YAML would keep "
        "this one and ignore the first without a word: remove one",
        "2 problem(s); nothing was started." + UNREAD,
    ]


def test_the_closing_line_is_never_broken_off_a_terminal(tmp_path: Path) -> None:
    """Ten problems make the last line 81 characters: off a terminal rich broke it at
    80, inside the command it suggests."""
    typos = GOOD + "".join(f"unknown_{i}: 1\n" for i in range(10))
    assert refused(tmp_path, typos)[-1] == (
        "10 problem(s); nothing was started. `scheduler schema` prints every accepted key." + UNREAD
    )


def test_an_agent_program_missing_here_is_a_warning_naming_its_line(tmp_path: Path) -> None:
    """A typo in the agent's command word would end every run "could not start": validate
    says so where the command is, and still exits 0 (the workers may have it)."""
    typo = GOOD.replace('command: "echo hi"', 'command: "claud -p \\"$PROMPT\\""')
    result = run_cli("validate", str(write(tmp_path, typo)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert (
        f"warning: {tmp_path / 'matrix.yaml'}:3:33: agent.command: 'claud' is run by the "
        "agent's command, but it is not on the agent's PATH on this machine: every run would "
        'end "agent could not start (exit 127)" on a worker without it'
    ) in " ".join(result.stderr.split())


def test_bash_values_are_never_taken_for_programs_missing_here(tmp_path: Path) -> None:
    """Arithmetic, arrays and tests hold values, not commands: `$((RANDOM % 2))` was
    warned about as a program 'RANDOM' that every run would fail to start. A program
    run inside a subshell or a substitution is still looked up."""
    matrix = tmp_path / "matrix.yaml"
    for command in (
        "echo $((RANDOM % 2))",
        "n=$((1+2)); echo $n",
        "(( EVALFLEET_RUN_INDEX > 1 )) && touch out.txt",
        "arr=(a b c); echo ${arr[0]}",
        "for ((i=0; i<2; i++)); do [[ -n $x && -f y ]] || echo $i; done",
    ):
        given = GOOD.replace('command: "echo hi"', f"command: '{command}'")
        result = run_cli("validate", str(write(tmp_path, given)), env=KEYED)
        assert result.returncode == 0, result.stderr
        assert "is run by the agent's command" not in result.stderr, (command, result.stderr)
    for command, missing in (
        ("(cd . && claud -p x)", "claud"),
        ("echo $(nosuchtool) | cat", "nosuchtool"),
        ("n=$(( $(nproc2) * 2 )); echo $n", "nproc2"),
    ):
        given = GOOD.replace('command: "echo hi"', f"command: '{command}'")
        result = run_cli("validate", str(write(tmp_path, given)), env=KEYED)
        assert result.returncode == 0, result.stderr
        warnings = " ".join(result.stderr.split())
        assert f"warning: {matrix}:3:33: agent.command: {missing!r} is run by the agent's " in (
            warnings
        ), (command, result.stderr)
        assert warnings.count("is run by the agent's command") == 1, (command, result.stderr)


def test_one_is_said_in_the_singular(tmp_path: Path) -> None:
    """One run a tier: "65 scenarios x 1 runs" and "for 1 of 1 scenarios" read wrong."""
    one = GOOD.replace("runs_per_tier: 3", "runs_per_tier: 1")
    result = run_cli("validate", str(write(tmp_path, one)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert "2 tiers x 1 scenario x 1 run = 2 runs" in result.stdout
    assert "for 1 of 1 scenario" in result.stdout and "1 scenario x 1 run a tier" in result.stdout
    more = "".join(f'  - {{id: s{i}, prompt: "do it"}}\n' for i in range(2, 8))
    seven = one.replace("judge: {model: gpt-4o-mini", more + "judge: {model: gpt-4o-mini")
    result = run_cli("validate", str(write(tmp_path, seven)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert "to detect 30 points on scenarios like these: 65 scenarios x 1 run; " in result.stdout
    assert not re.search(r"\b1 (runs|scenarios|tests)\b", result.stdout), result.stdout


def test_validate_summarizes_a_good_matrix(tmp_path: Path) -> None:
    result = run_cli("validate", str(write(tmp_path, GOOD)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert "2 tiers x 1 scenario x 3 runs = 6 runs" in result.stdout
    assert "command_json_path, file_exists" in result.stdout
    assert "judge >= 0.7" in result.stdout
    assert "gpt-4o-mini" in result.stdout


def test_validate_says_once_which_judge_runs_and_why(tmp_path: Path) -> None:
    """The example's judge is `enabled: auto`: on with OPENAI_API_KEY, off without."""
    without = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    off = run_cli("validate", str(EXAMPLES / "matrix.yaml"), env=without)
    assert off.returncode == 0, off.stderr
    judge_lines = [line for line in off.stdout.splitlines() if line.startswith("judge:")]
    assert judge_lines == [
        "judge: off: OPENAI_API_KEY is not set, so scenarios with `judge: {enabled: auto}` "
        "run without one (set it to judge them)"
    ]
    assert "gpt-4o-mini" not in off.stdout
    on = run_cli(
        "validate", str(EXAMPLES / "matrix.yaml"), env={**without, "OPENAI_API_KEY": "sk-test-key"}
    )
    assert "judge: openai gpt-4o-mini @ https://api.openai.com/v1, for 1 of 2 scenarios" in (
        on.stdout
    )
    assert "judge >= " in on.stdout
    # Turned on by hand without its key here: validate says what the runs would get.
    copy = shutil.copytree(EXAMPLES, tmp_path / "examples")
    text = (copy / "matrix.yaml").read_text().replace("enabled: auto", "enabled: true")
    (copy / "matrix.yaml").write_text(
        text.replace("OPENAI_API_KEY\n", "OPENAI_API_KEY\n  repeats: 3\n")
    )
    refused = run_cli("validate", str(copy / "matrix.yaml"), env=without)
    assert refused.returncode == 2, refused.stdout
    assert "judge.api_key_env: OPENAI_API_KEY is not set, and scenario create_notes is judged" in (
        refused.stderr
    )
    assert "--allow-missing-keys" in refused.stderr
    # The workers have the key: validate says what the runs would get where it is not.
    unset = run_cli("validate", str(copy / "matrix.yaml"), "--allow-missing-judge-key", env=without)
    assert unset.returncode == 0, unset.stderr
    assert (
        "for 1 of 2 scenarios, 3 judgments per run; OPENAI_API_KEY is not set here (the workers "
        "need it to judge: without it every judged run is an infrastructure error)"
    ) in unset.stdout


def test_a_judged_scenario_without_a_judge_section_is_told_its_two_ways_out(
    tmp_path: Path,
) -> None:
    text = GOOD.replace("judge: {model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}\n", "")
    result = run_cli("validate", str(write(tmp_path, text)), env=KEYED)
    assert result.returncode == 2
    assert (
        f"error: {tmp_path / 'matrix.yaml'}:19:14: scenarios.0.evaluation.judge: scenario "
        "'s1' enables the judge but the matrix has no top-level `judge:` section: add one (its "
        "`model:` and `api_key_env:`), or judge only where one is set with this scenario's "
        "`judge: {enabled: auto}`"
    ) in " ".join(result.stderr.split())


def test_validate_says_an_auto_judge_without_a_judge_section_is_off(tmp_path: Path) -> None:
    text = GOOD.replace("judge: {rubric: rubric.yaml", "judge: {enabled: auto, rubric: rubric.yaml")
    text = text.replace("judge: {model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}\n", "")
    result = run_cli("validate", str(write(tmp_path, text)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert (
        "judge: off: scenarios ask for one with `enabled: auto` but the matrix has no "
        "top-level `judge:` section"
    ) in result.stdout.splitlines()


def test_validate_warns_of_an_agent_model_without_a_price(tmp_path: Path) -> None:
    """The README's preset examples' models are priced built in (OpenCode's under its
    provider); any other model without `pricing:` is a warning naming the tiers."""
    tiers = {
        "claude": "claude-sonnet-4",
        "codex": "gpt-5-codex",
        "gemini": "gemini-2.5-pro",
        "opencode": "anthropic/claude-sonnet-4-5",
        "mine": "my-model",
        "mine2": "my-model",
    }
    listed = "".join(f"  - {{id: {t}, agent: {{model: {m}}}}}\n" for t, m in tiers.items())
    text = GOOD.replace("  - id: T0\n  - id: T1\n    files: {AGENTS.md: guide.md}\n", listed)
    result = run_cli("validate", str(write(tmp_path, text)), env=KEYED)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "has no price" in line]
    # At the first tier's `model:` that names it (line 9 of the file).
    assert warnings == [
        f"warning: {tmp_path / 'matrix.yaml'}:9:31: tiers.4.agent.model: tiers mine, mine2: "
        "model 'my-model' has no price, so their runs' cost and cost of pass will be unknown; "
        "add it under `pricing:` in the matrix (my-model: {input: ..., output: ...}, $ per 1M "
        "tokens)"
    ]
    priced = write(tmp_path, text + "pricing: {my-model: {input: 1, output: 2}}\n")
    assert "has no price" not in run_cli("validate", str(priced), env=KEYED).stderr
    # A typo of a priced model (the matrix's or a built-in one) is fixed at the model.
    typo = write(
        tmp_path,
        priced.read_text().replace(
            "mine2, agent: {model: my-model", "mine2, agent: {model: my-modle"
        ),
    )
    said = run_cli("validate", str(typo), env=KEYED).stderr
    assert (
        "model 'my-modle' has no price, so its runs' cost and cost of pass will be unknown; did "
        "you mean `my-model`? Else add it under `pricing:`"
    ) in " ".join(said.split())


ROUTED = """\
name: routed
runs_per_tier: 2
agent: {preset: gemini-cli}
tiers:
  - id: routed
  - id: pinned
    agent: {model: gemini-2.5-pro}
  - id: codex
    agent: {preset: codex}
scenarios:
  - {id: s1, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
"""


def test_validate_and_submit_warn_that_a_cli_picking_its_own_model_leaves_cost_unknown(
    tmp_path: Path,
) -> None:
    """Gemini CLI has no default model: without `model:` it picks one for each request,
    so no price can be known before the runs, nor after (none of the models it picked
    has one). Validate says so where the preset is set, with the fix, and so does
    submit before it sends anything; a tier naming a priced model, or a preset whose
    CLI asks for a known default (Codex), draws nothing."""
    matrix = write(tmp_path, ROUTED)
    env = {k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "OPENAI_API_KEY")}
    warning = (
        f"warning: {matrix}:3:17: agent.preset: tier routed: no `model:` is set and Gemini CLI "
        "picks a model itself for each request (the pinned one asked gemini-3.5-flash-lite, "
        "then gemini-3.1-pro-preview, in one run), so its runs' cost and cost of pass will be "
        "unknown; set `model:` on the agent (the matrix's or the tier's: the CLI is then given "
        "--model), and add its price under `pricing:` if it has no built-in one"
    )
    validated = run_cli("validate", str(matrix), "--allow-missing-keys", env=env)
    assert validated.returncode == 0, validated.stderr
    assert "  tier routed: command (gemini " in validated.stdout
    assert "model none set (the CLI picks one itself), timeout" in validated.stdout
    assert "model gpt-6.1-sol (the CLI's default)" in validated.stdout
    cost = [line for line in validated.stderr.splitlines() if "cost" in line]
    assert cost == [warning]
    # Submit says it before it reaches for the broker (here: none listens).
    submitted = run_cli(
        "submit", str(matrix), "--allow-missing-keys", "--broker", "redis://127.0.0.1:1/0", env=env
    )
    assert submitted.returncode == 1 and "cannot reach the broker" in submitted.stderr
    assert [line for line in submitted.stderr.splitlines() if "cost" in line] == [warning]
    # Named, the model is given to the CLI and priced: nothing to warn of.
    pinned = write(
        tmp_path,
        ROUTED.replace("{preset: gemini-cli}", "{preset: gemini-cli, model: gemini-2.5-pro}"),
    )
    quiet = run_cli("validate", str(pinned), "--allow-missing-keys", env=env)
    assert quiet.returncode == 0 and "cost" not in quiet.stderr, quiet.stderr


def test_validate_accepts_the_example() -> None:
    result = run_cli("validate", str(EXAMPLES / "matrix.yaml"), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert "3 tiers x 2 scenarios x 5 runs = 30 runs" in result.stdout


BAD = [
    # (replace this, with this, expected fragments of the message)
    ("runs_per_tier: 3", "runs_per_tier: [3", ["matrix.yaml:3:", "YAML syntax error"]),
    # A value YAML reads as a number or a truth value where text is wanted: quote it.
    (
        "model: claude-sonnet-4}",
        "model: claude-sonnet-4, env: {PY: 3.10, DEBUG: yes}}",
        [
            "agent.env.PY: Input should be a valid string; YAML read 3.10 as a number: "
            'quote it ("3.10")',
            "agent.env.DEBUG: Input should be a valid string; YAML read yes as true or "
            'false: quote it ("yes")',
        ],
    ),
    # A `}` left out: the parser reads on into the next keys and stops lines below.
    (
        "model: claude-sonnet-4}",
        "model: claude-sonnet-4,",
        ["YAML syntax error", "(a bracket opened at line 3, column 8 is not closed before it)"],
    ),
    # Found lines below the unclosed quote: where what it was reading began is said too.
    (
        'command: "echo hi"',
        'command: "echo hi',
        [
            "matrix.yaml:10:14: YAML syntax error: expected ',' or '}', but got '<scalar>' "
            "(while parsing a flow mapping that begins at line 3, column 8)"
        ],
    ),
    ("runs_per_tier: 3", "runs_per_tier: 3\nrunz: 4", ["matrix.yaml:3:", "runz", "unknown key"]),
    (
        "'my-tool\\s+(\\S+)'",
        "'my-tool(('",
        ["scenarios.0.target.command_pattern", "invalid regular expression"],
    ),
    ('path: "$.items[0]"', 'path: "$.items["', ["scenarios.0.evaluation.gates.0.path", "JSONPath"]),
    ('assertion: "len >= 3"', 'assertion: "size > 3"', ["gates.0.assertion", "len >= N"]),
    (
        "type: file_exists",
        "type: file_exist",
        ["gates.1", "unknown gate type", "did you mean `file_exists`"],
    ),
    # "Did you mean": the nearest keys at that place, or where a misplaced key belongs.
    (
        "runs_per_tier: 3",
        "runs_per_teir: 3",
        ["matrix.yaml:2:16: runs_per_teir: unknown key; did you mean `runs_per_tier`?"],
    ),
    (
        "  - id: T0\n",
        "  - id: T0\n    pricing: {}\n",
        ["tiers.0.pricing: unknown key; `pricing` is a key of the top level, not of this place"],
    ),
    ("path: out.txt", "pth: out.txt", ["gates.1.pth: unknown key; did you mean `path`?"]),
    (
        "kind: command,",
        "kind: command, preset: claude,",
        ["agent.preset", "did you mean `claude-code`?"],
    ),
    (
        "runs_per_tier: 3",
        "runs_per_tier: 3\nbaseline: T",
        ["is not a tier", "did you mean `T1` or `T0`?"],
    ),
    ("pass_threshold: 0.7", "pass_threshold: 1.7", ["pass_threshold", "less than or equal to 1"]),
    ("rubric: rubric.yaml", "rubric: missing.yaml", ["judge.rubric", "file not found"]),
    ("AGENTS.md: guide.md", "AGENTS.md: nope.md", ["tiers.1.files.AGENTS.md", "file not found"]),
    # There, but a folder: not "not found".
    ("AGENTS.md: guide.md", "AGENTS.md: .", ["tiers.1.files.AGENTS.md: expected a file, but "]),
    ("  - id: T1", "  - id: T0", ["duplicate tier id 'T0'"]),
    ("runs_per_tier: 3", "runs_per_tier: 3\nbaseline: T9", ["baseline 'T9' is not a tier"]),
    ("model: gpt-4o-mini", "model: claude-sonnet-4", ["allow_self_judge"]),
    ("runs_per_tier: 3", "runs_per_tier: .nan", ["runs_per_tier"]),
    # The union's tag ("count") is no key of the file: not in the path.
    ("runs_per_tier: 3", "runs_per_tier: 0", ["matrix.yaml:2:16: runs_per_tier: Input should be"]),
    ('command: "echo hi", ', "", ["needs `command`"]),
]


@pytest.mark.parametrize(("old", "new", "fragments"), BAD)
def test_validate_refuses_bad_matrices(
    tmp_path: Path, old: str, new: str, fragments: list[str]
) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    result = run_cli("validate", str(path), env=KEYED)
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_a_misplaced_key_is_told_where_it_belongs(tmp_path: Path) -> None:
    """`gates:` directly under a scenario: the message says it belongs under `evaluation:`."""
    text = GOOD.replace("    evaluation:\n      gates:", "    gates:").replace(
        "      judge: {rubric: rubric.yaml, pass_threshold: 0.7}\n", ""
    )
    result = run_cli("validate", str(write(tmp_path, text)), env=None)
    assert result.returncode == 2, result.stdout
    assert (
        f"error: {tmp_path / 'matrix.yaml'}:13:9: scenarios.0.gates: unknown key; "
        "`gates` belongs under `evaluation:`"
    ) in result.stderr


def test_error_names_the_yaml_line_of_the_bad_value(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('assertion: "len >= 3"', 'assertion: "len => 3"'))
    result = run_cli("validate", str(path), env=KEYED)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "len => 3" in text)
    assert f"matrix.yaml:{line}:" in result.stderr


def test_bad_rubric_weight_is_refused_with_the_rubric_file_named(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, rubric="criteria:\n  - {id: done, weight: -1, description: x}\n")
    result = run_cli("validate", str(path), env=KEYED)
    assert result.returncode == 2
    assert "rubric.yaml" in result.stderr and "criteria.0.weight" in result.stderr


def test_missing_matrix_file(tmp_path: Path) -> None:
    result = run_cli("validate", str(tmp_path / "none.yaml"), env=KEYED)
    assert result.returncode == 2
    assert "file not found" in result.stderr


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/etc/passwd", "'/etc/passwd' is absolute; a gate's path is relative to the run's"),
        ("logs/../../secret.txt", "'logs/../../secret.txt' leaves the run's workspace"),
    ],
)
def test_a_file_gate_reading_outside_the_workspace_is_refused_before_any_run(
    tmp_path: Path, path: str, said: str
) -> None:
    # The gate would refuse to read it at every run: the matrix is refused instead.
    matrix = write(
        tmp_path,
        GOOD.replace(
            "{type: file_exists, path: out.txt}", f"{{type: file_exists, path: '{path}'}}"
        ),
    )
    refused = run_cli("validate", str(matrix), env=KEYED)
    assert refused.returncode == 2, refused.stdout
    assert f"{matrix}:18:" in refused.stderr
    assert "scenarios.0.evaluation.gates.1" in refused.stderr and said in refused.stderr


def test_schema_is_json_schema_of_the_matrix() -> None:
    result = run_cli("schema", env=KEYED)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert set(schema["required"]) >= {"name", "agent", "tiers", "scenarios"}
    gate_types = json.dumps(schema["$defs"])
    for gate in ("command_json_path", "no_transcript_errors", "script", "file_matches"):
        assert gate in gate_types
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    "source",
    ["../../../../../../../../etc/hostname", "/etc/hostname", "inside/link-to-hostname"],
    ids=["dot-dot", "absolute", "symlink"],
)
def test_tier_files_outside_the_matrix_folder_are_refused_unless_allowed(
    tmp_path: Path, source: str
) -> None:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "link-to-hostname").symlink_to("/etc/hostname")
    path = write(tmp_path, GOOD.replace("AGENTS.md: guide.md", f"AGENTS.md: {source}"))
    refused = run_cli("validate", str(path), env=KEYED)
    assert refused.returncode == 2, refused.stdout
    assert "Traceback" not in refused.stderr
    for fragment in (
        str(path),
        "tiers.1.files.AGENTS.md: /etc/hostname is outside the matrix folder",
        "allow_outside_files: true",
    ):
        assert fragment in refused.stderr, refused.stderr

    path.write_text(f"allow_outside_files: true\n{path.read_text()}")
    allowed = run_cli("validate", str(path), env=KEYED)
    assert allowed.returncode == 0, allowed.stderr
    assert "tier T1: " in allowed.stdout and "files: AGENTS.md" in allowed.stdout


# Each matrix path, pointed at a file or folder beside the matrix folder (`../elsewhere`,
# after `..` is resolved: outside) by an edit of GOOD.
OUTSIDE_PATHS = {
    "scenarios.0.prompt_file": ('prompt: "do it"', "prompt_file: ../elsewhere/prompt.md"),
    "scenarios.0.workspace": ('prompt: "do it"', 'prompt: "do it"\n    workspace: ../elsewhere'),
    "scenarios.0.evaluation.judge.rubric": ("rubric: rubric.yaml", "rubric: ../elsewhere/r.yaml"),
    "agent.system_prompt_file": (
        "model: claude",
        "system_prompt_file: ../elsewhere/p.md, model: claude",
    ),
    "agent.skills.0": ("model: claude", "skills: [../elsewhere/p.md], model: claude"),
    "agent.docker.build": (
        "model: claude",
        "sandbox: docker, docker: {build: ../elsewhere/Dockerfile}, model: claude",
    ),
    "base_dir": ("name: demo", "name: demo\nbase_dir: ../elsewhere"),
}


@pytest.mark.parametrize("field", sorted(OUTSIDE_PATHS))
def test_every_matrix_path_outside_the_matrix_folder_is_refused_unless_allowed(
    tmp_path: Path, field: str
) -> None:
    """`prompt_file: /etc/shadow` or `workspace: ../../etc/ssh` would be shipped to every
    worker and read by the agent: each path is held to the tier files' rule."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("prompt.md", "p.md", "Dockerfile"):
        (elsewhere / name).write_text("the submitter's private file")
    (elsewhere / "r.yaml").write_text(RUBRIC)
    (tmp_path / "matrix").mkdir()
    old, new = OUTSIDE_PATHS[field]
    assert old in GOOD
    path = write(tmp_path / "matrix", GOOD.replace(old, new, 1))
    refused = run_cli("validate", str(path), env=KEYED)
    assert refused.returncode == 2, refused.stdout
    assert "Traceback" not in refused.stderr
    assert f"{field}: {elsewhere}" in refused.stderr, refused.stderr
    for fragment in (str(path), "is outside the matrix folder", "allow_outside_files: true"):
        assert fragment in refused.stderr, refused.stderr

    path.write_text(f"allow_outside_files: true\n{path.read_text()}")
    allowed = run_cli("validate", str(path), env=KEYED)
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize(
    ("judge_model", "warned"), [("gpt-4o-mini", False), ("house-judge-7b", True)]
)
def test_validate_shows_a_budget_and_warns_when_the_judge_cannot_be_counted(
    tmp_path: Path, judge_model: str, warned: bool
) -> None:
    text = GOOD.replace("model: gpt-4o-mini", f"model: {judge_model}")
    text += "budget: {agent_usd: 5, judge_usd: 0.5}\n"  # no prior_usd: nothing to show of it
    result = run_cli("validate", str(write(tmp_path, text)), env=KEYED)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "budget: agents $5, judge $0.5\n" in result.stdout + "\n"
    warning = f"the judge model {judge_model!r} has no price"
    assert (warning in result.stdout) is warned


def test_validate_refuses_a_run_longer_than_the_visibility_timeout(tmp_path: Path) -> None:
    env = {**KEYED, "EVALFLEET_VISIBILITY_TIMEOUT": "10"}
    result = run_cli("validate", str(write(tmp_path, GOOD)), env=env)
    assert result.returncode == 2, result.stdout
    assert "more than the broker's visibility timeout (10 s)" in result.stderr


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("validate", *args, env=dict(os.environ))


def _scenarios_matrix(tmp_path: Path, scenarios: int, runs: str, tiers: int = 2) -> Path:
    listed = ", ".join(f"{{id: s{i}, prompt: go}}" for i in range(scenarios))
    ids = ", ".join(f"{{id: T{i}}}" for i in range(tiers))
    path = tmp_path / "matrix.yaml"
    path.write_text(
        f"name: plan\nruns_per_tier: {runs}\nagent: {{kind: command, command: 'true'}}\n"
        f"tiers: [{ids}]\nscenarios: [{listed}]\n"
    )
    return path


def test_validate_plans_what_each_question_can_detect(tmp_path: Path) -> None:
    result = _validate(str(_scenarios_matrix(tmp_path, 4, "20")), "--icc", "0.25")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # One tier against the baseline: four tests, Holm's first step at 0.05 / 4.
    level, g, m, icc = 0.05 / 4, 4, 20, 0.25
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)
    t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
    these = z * (2 * 0.25 * (1 - icc) / (g * m)) ** 0.5
    like = t * (2 * 0.25 * (1 + (m - 1) * icc) / (g * m)) ** 0.5
    assert "two-sided at 0.0125" in out and "design effect 5.75" in out
    assert f"  on these scenarios: a difference of {these * 100:.0f} points or more\n" in out
    # 4 scenarios cannot tell a difference of a pass rate on scenarios like these: the
    # plan says so in points, and how many scenarios would tell one of 30 points.
    assert (
        "  on scenarios like these: none (the smallest it could detect, "
        f"{math.ceil(like * 100)} points, is more than the 100 pass rates span)"
    ) in out

    def like_these(g: int, m: int) -> float:
        t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
        return t * (2 * 0.25 * (1 + (m - 1) * icc) / (g * m)) ** 0.5

    fewest = next(g for g in range(2, 1000) if like_these(g, m) <= 0.3)
    assert (
        f"  to detect 30 points on scenarios like these: {fewest} scenarios x 20 runs; "
        "more runs on 4 scenarios alone cannot promise it\n"
    ) in out
    assert "twice the scenarios (8 x 20)" in out and "twice the runs (4 x 40)" in out
    assert "4 scenarios are too few to generalise from" in out

    many = _validate(str(_scenarios_matrix(tmp_path, 12, "10")))
    assert "intra-scenario correlation 0.3 assumed" in many.stdout
    assert "too few to generalise" not in many.stdout
    line = next(x for x in many.stdout.splitlines() if "on scenarios like these:" in x)
    assert "below that only more scenarios go" in line


def test_validate_promises_nothing_of_more_runs_on_too_few_scenarios(tmp_path: Path) -> None:
    """At a correlation of 0 the formula's limit with unlimited runs is 0 points, and
    its runs to detect 30 points thousands: with 2 scenarios, which cannot measure how
    much scenarios differ, neither is a promise the experiment can keep. The plan says
    so, and what more scenarios would detect."""
    result = _validate(str(_scenarios_matrix(tmp_path, 2, "5")), "--icc", "0")
    assert result.returncode == 0, result.stderr
    like = next(x for x in result.stdout.splitlines() if "on scenarios like these:" in x)
    assert "0 points or more" not in like and "unlimited runs" not in like
    assert like.endswith(
        "; more runs alone cannot be counted on to detect less: how much scenarios differ "
        "from one another bounds what more runs per scenario can detect, and 2 scenarios "
        "cannot measure it"
    )
    level = 0.05 / 4

    def like_these(g: int) -> float:
        t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
        return t * (2 * 0.25 / (g * 5)) ** 0.5

    fewest = next(g for g in range(2, 1000) if like_these(g) <= 0.3)
    assert (
        f"  to detect 30 points on scenarios like these: {fewest} scenarios x 5 runs; "
        "more runs on 2 scenarios alone cannot promise it\n"
    ) in result.stdout


def test_validate_plans_nothing_for_one_tier_and_says_one_scenario_cannot_generalise(
    tmp_path: Path,
) -> None:
    alone = _validate(str(_scenarios_matrix(tmp_path, 3, "5", tiers=1)))
    assert alone.returncode == 0 and "planning" not in alone.stdout
    one = _validate(str(_scenarios_matrix(tmp_path, 1, "20")), "--icc", "0.5")
    assert "on scenarios like these: not answered: it needs two scenarios or more" in one.stdout
    # One scenario: the report's own two run-level tests at their level, as its "could
    # detect" has them; its runs are draws of that scenario alone (no correlation).
    assert "two-sided at 0.025 (the level one of the 2 run-level tests must reach alone" in (
        one.stdout
    )
    z = stats.norm.ppf(1 - 0.025 / 2) + stats.norm.ppf(0.8)
    alone = z * (2 * 0.25 / 20) ** 0.5
    assert f"  on this scenario: a difference of {alone * 100:.0f} points or more\n" in one.stdout
    assert "design effect" not in one.stdout and "- like these" not in one.stdout
    adaptive = _validate(
        str(_scenarios_matrix(tmp_path, 3, "{min: 5, max: 40, until: {decided: true}}"))
    )
    assert adaptive.returncode == 0, adaptive.stderr
    assert "3 scenarios x 40 runs at most (adaptive: each cell's max)" in adaptive.stdout
    assert "on scenarios like these only more scenarios do" in adaptive.stdout
    bad = _validate(str(_scenarios_matrix(tmp_path, 3, "5")), "--icc", "1.5")
    assert bad.returncode == 2 and "--icc" in bad.stderr


def test_schema_is_made_once_for_the_same_code_and_anew_for_other_code(tmp_path: Path) -> None:
    from core.matrix import matrix_json_schema
    from scheduler.cli.validate import code_digest

    env = {**KEYED, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    made = run_cli("schema", env=env)
    kept = list((tmp_path / "cache" / "evalfleet").glob("matrix-schema-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == matrix_json_schema()
    # Read back, not made: the matrix's models are not imported.
    probe = (
        "import sys; from scheduler.cli import main; "
        "main.main(['schema'], 'scheduler', standalone_mode=False); "
        "print('core.matrix' in sys.modules, file=sys.stderr)"
    )
    again = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert again.stdout == made.stdout and again.stderr.strip() == "False"
    # Another source of core (a model changed) is another digest, so another file.
    source = tmp_path / "core"
    shutil.copytree(Path(matrix_json_schema.__code__.co_filename).parents[1], source)
    before = code_digest(source)
    scoring = source / "matrix" / "scoring.py"
    scoring.write_text(scoring.read_text() + "\n# changed\n")
    assert code_digest(source) != before
