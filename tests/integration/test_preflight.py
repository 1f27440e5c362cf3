"""`scheduler preflight`: each tier x scenario run once, locally, against the scripted
model server, and the scenarios themselves checked, before anything is spent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import ROOT, StartWorker, run_cli
from tests.support.llm_stub import LLMStub, scripted_judge
from tests.support.terminal import planning_lines

# Codex 0.169 as it meets `--full-auto`, a flag it no longer has (clap's refusal).
OLD_FLAG_CODEX = """\
#!/bin/sh
for arg; do
  if [ "$arg" = --full-auto ]; then
    printf "error: unexpected argument '--full-auto' found\\n\\nUsage: codex exec [OPTIONS]\\n" >&2
    exit 2
  fi
done
"""


def write_matrix(
    folder: Path, broken: bool, judged: bool = True, judge_url: str = "https://api.invalid/v1"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    reference = "printf bye > out.txt" if broken else "printf hello > out.txt"
    vacuous = "true" if broken else "test -s out.txt"
    key = "PREFLIGHT_UNSET_JUDGE_KEY" if broken else "PREFLIGHT_SET_JUDGE_KEY"
    refusing = ""
    if broken:  # a preset whose CLI refuses the flags it is given
        (folder / "bin").mkdir(exist_ok=True)
        (folder / "bin" / "codex").write_text(OLD_FLAG_CODEX)
        (folder / "bin" / "codex").chmod(0o755)
        on_path = json.dumps(f"{folder / 'bin'}:${{PATH}}")
        refusing = (f"  - {{id: refusing, agent: {{preset: codex, permission_flags: --full-auto,"
                    f" env: {{PATH: {on_path}}}}}}}")  # fmt: skip
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
    prompt: Write hello to out.txt (JUDGED-MARK).
    reference: printf hello > out.txt
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{enabled: {str(judged).lower()}, rubric: rubric.yaml}}
judge: {{api_key_env: {key}, base_url: "{judge_url}", model: j}}
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
    # The cli column: the preset's CLI was found, but it refused its flags.
    refusing_rows = [row.split() for row in table[1:] if row.startswith("refusing")]
    assert [row[2:5] for row in refusing_rows] == [["refuses", "flags", "agent_error"]] * 3


@pytest.mark.integration
def test_the_example_is_sound(fleet_env: dict[str, str]) -> None:
    checked = run_cli("preflight", str(ROOT / "examples" / "matrix.yaml"), env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    spend = next(i for i, line in enumerate(lines) if line.startswith("estimated spend"))
    assert spend == 1 + 6  # header, 3 tiers x 2 scenarios, then the spend
    assert lines[spend + 1].startswith("planning: ")  # then validate's planning


@pytest.mark.integration
def test_preflight_plans_what_the_experiment_can_detect_as_validate_does(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """Two tiers, so something is compared: the smallest difference each question can
    detect, the very lines `validate` prints, at the same assumed correlation."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: planned
runs_per_tier: 8
agent: {command: "printf hello > out.txt", transcript: plain}
tiers: [{id: T0}, {id: T1}]
scenarios:
  - {id: s1, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
  - {id: s2, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
  - {id: s3, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
""")
    validated = run_cli("validate", str(matrix), "--icc", "0.15", env=fleet_env)
    assert validated.returncode == 0, validated.stderr
    expected = planning_lines(validated.stdout)
    assert "3 scenarios x 8 runs a tier" in expected[0]
    assert "intra-scenario correlation 0.15 assumed" in expected[0]
    checked = run_cli("preflight", str(matrix), "--icc", "0.15", env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0].split()[:2] == ["tier", "scenario"] and len(lines) > 8
    assert planning_lines(checked.stdout) == expected
    # Without --icc, the same default as validate's.
    assumed = run_cli("preflight", str(matrix), env=fleet_env)
    assert planning_lines(assumed.stdout) == planning_lines(
        run_cli("validate", str(matrix), env=fleet_env).stdout
    )
    assert "intra-scenario correlation 0.3 assumed" in planning_lines(assumed.stdout)[0]


@pytest.mark.integration
def test_the_built_in_agent_is_pointed_at_the_scripted_server(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """`kind: openai` goes to the server's Chat Completions instead of its `base_url`,
    runs the scripted bash call for real, and its tokens price the spend."""
    (tmp_path / "turns.yaml").write_text("""
turns:
  - tool_calls: [{name: bash, arguments: {command: "printf hello > out.txt"}}]
    usage: {input_tokens: 1000, output_tokens: 100}
  - {text: done, usage: {input_tokens: 1500, output_tokens: 10}}
""")
    (tmp_path / "matrix.yaml").write_text("""
name: built-in
runs_per_tier: 4
agent: {kind: openai, base_url: "https://api.invalid/v1", api_key_env: PREFLIGHT_KEY, model: m}
tiers: [{id: loop}]
scenarios:
  - id: write
    prompt: Write hello to out.txt.
    evaluation: {gates: [{type: file_contains, path: out.txt, substring: hello}]}
pricing: {m: {input: 1.0, output: 10.0}}
""")
    checked = run_cli(
        "preflight", str(tmp_path / "matrix.yaml"), "--script", str(tmp_path / "turns.yaml"),
        env=fleet_env,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    row = checked.stdout.splitlines()[1].split()
    assert row[:6] == ["loop", "write", "-", "completed", "events-jsonl", "1/1"]
    # (2500 x $1 + 110 x $10) / 1M per run, 4 runs
    assert row[-1] == "$0.0144"


@pytest.mark.integration
def test_the_agent_key_column_says_which_key_was_missing_and_the_check_still_ran(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """An unset agent key is replaced by a placeholder for the scripted server, and the
    table says so in its own column; it is no problem (the workers may hold it)."""
    # The agent writes out.txt only when it was given a key: the placeholder counts.
    write = 'test -n "${KEY_VAR}" && printf hello > out.txt'
    (tmp_path / "matrix.yaml").write_text(f"""
name: agent-keys
runs_per_tier: 1
agent: {{command: 'printf hello > out.txt', transcript: plain}}
tiers:
  - id: keyless
  - id: keyed
    agent: {{command: '{write.replace("KEY_VAR", "PREFLIGHT_AGENT_KEY_SET")}',
             api_key_env: PREFLIGHT_AGENT_KEY_SET}}
  - id: unkeyed
    agent: {{command: '{write.replace("KEY_VAR", "PREFLIGHT_AGENT_KEY_UNSET")}',
             api_key_env: PREFLIGHT_AGENT_KEY_UNSET}}
scenarios:
  - id: write
    prompt: Write hello to out.txt.
    evaluation: {{gates: [{{type: file_contains, path: out.txt, substring: hello}}]}}
""")
    checked = run_cli("preflight", str(tmp_path / "matrix.yaml"),
                      env={**fleet_env, "PREFLIGHT_AGENT_KEY_SET": "k"})  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    header, *rows = checked.stdout.splitlines()[:4]
    assert header.split()[-6:] == ["judge", "key", "agent", "key", "est.", "spend"]
    start = header.index("agent key")
    keys = {row.split()[0]: row[start:].split("  ")[0].strip() for row in rows}
    assert keys == {"keyed": "set", "unkeyed": "missing PREFLIGHT_AGENT_KEY_UNSET", "keyless": "-"}
    assert all(row.split()[3:6] == ["completed", "plain", "1/1"] for row in rows), rows


@pytest.mark.integration
def test_submit_preflight_sends_nothing_unless_sound(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    broken = write_matrix(tmp_path / "broken", broken=True)
    before = {e.id for e in store.experiments.all()}
    refused = run_cli("submit", str(broken), "--preflight", "--wait", "--json", env=fleet_env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "4 problem(s): the experiment is not sound yet" in refused.stderr
    assert {e.id for e in store.experiments.all()} == before  # nothing was sent

    sound = write_matrix(tmp_path / "sound", broken=False, judged=False)
    (tmp_path / "sound").chmod(0o700)  # else warned of first: other users may read it
    start_worker(concurrency=2)
    sent = run_cli("submit", str(sound), "--preflight", "--wait", "--json", env=fleet_env)
    # The preflight's table went to stderr, the report alone to stdout.
    assert sent.returncode == 0, sent.stderr
    # After submit's warnings (its plain transcript records no usage of model m).
    said = [line for line in sent.stderr.splitlines() if not line.startswith("warning:")]
    assert said[0].split()[:2] == ["tier", "scenario"]
    assert json.loads(sent.stdout)["experiment"]["name"] == "preflight"


@pytest.mark.integration
def test_judge_calls_the_judge_and_live_uses_no_scripted_server(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    with LLMStub([scripted_judge({"JUDGED-MARK": [0.8]})]) as judge:
        matrix = write_matrix(tmp_path, broken=False, judge_url=judge.base_url)
        env = {**fleet_env, "PREFLIGHT_SET_JUDGE_KEY": "k"}
        judged = run_cli("preflight", str(matrix), "--judge", env=env)
        assert judged.returncode == 0, judged.stderr
        rows = {tuple(line.split()[:2]): line for line in judged.stdout.splitlines()}
        assert "judged 0.80" in rows[("writes", "judged")]
        assert len(judge.requests) == 1  # the judged scenario's run only
        without = run_cli("preflight", str(matrix), env=env)
        assert len(judge.requests) == 1 and without.returncode == 0

    live = run_cli("preflight", str(matrix), "--live", env=env)
    assert live.returncode == 0, live.stderr
    assert "at this preflight's tokens" in live.stdout
    both = run_cli("preflight", str(matrix), "--live", "--script", str(matrix), env=env)
    assert both.returncode == 2 and "exclude each other" in both.stderr


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a machine running as root")
def test_an_agent_that_works_only_with_the_submitters_rights_fails_preflight_as_its_runs(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Preflight runs each agent as a worker does, as a user of the run's own reading the
    worker's copy of the files: reading a folder of the submitter's alone, or the
    matrix that evaluation keeps hidden, fails there as it fails every real run."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "notes.txt").write_text("the submitter's\n")
    folder = tmp_path / "exp"
    folder.mkdir()
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: confined-preflight
runs_per_tier: 1
agent: {{kind: command, command: "cat {private}/notes.txt > out.txt", timeout_s: 30}}
tiers:
  - {{id: private}}
  - {{id: hidden, agent: {{command: 'cat "$EVALFLEET_MATRIX_DIR/matrix.yaml" > out.txt'}}}}
  - {{id: own, agent: {{command: "echo mine > out.txt"}}}}
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: command_succeeds, command: "test -s out.txt"}}]}}
""")
    checked = run_cli("preflight", str(matrix), env=fleet_env)
    assert checked.returncode == 2, checked.stderr
    runs = {line.split()[0]: line.split()[3:6] for line in checked.stdout.splitlines()[1:4]}
    assert runs == {
        "private": ["agent_error", "events-jsonl", "0/1"],
        "hidden": ["agent_error", "events-jsonl", "0/1"],
        "own": ["completed", "events-jsonl", "1/1"],
    }
    problems = checked.stderr.splitlines()
    assert problems[-1] == "2 problem(s): the experiment is not sound yet"
    assert problems[0].startswith("tier private: the agent's run was agent_error: ")
    assert problems[0].endswith(f"cat: {private}/notes.txt: Permission denied")
    assert problems[1].startswith("tier hidden: the agent's run was agent_error: ")
    assert problems[1].endswith("matrix.yaml: Permission denied")

    start_worker(concurrency=2)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    results = store.results.all(json.loads(done.stdout)["experiment"]["id"])
    outcomes = {r.tier: (r.status.value, r.passed) for r in results}
    assert outcomes == {
        "private": ("agent_error", False),
        "hidden": ("agent_error", False),
        "own": ("completed", True),
    }
    assert {r.isolation for r in results} == {"user"}


@pytest.mark.integration
def test_a_reference_may_run_the_solution_the_scenario_keeps_from_agents(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """The reference is the experimenter's: it reads the scenario's `solution:`, which
    no agent may (as root, an agent runs as a user of its own that cannot), and its
    work is gated as an agent's would be."""
    folder = tmp_path / "exp"
    (folder / "solution").mkdir(parents=True)
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\nprintf hello > out.txt\n")
    matrix = folder / "matrix.yaml"
    matrix.write_text("""
name: solved-by-reference
runs_per_tier: 1
agent: {kind: command, command: "printf hello > out.txt", timeout_s: 30}
tiers: [{id: T0}]
scenarios:
  - id: s
    prompt: Write hello to out.txt.
    solution: solution
    reference: 'bash "$EVALFLEET_MATRIX_DIR/solution/solve.sh"'
    evaluation: {gates: [{type: file_contains, path: out.txt, substring: hello}]}
""")
    checked = run_cli("preflight", str(matrix), env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    # cli, run, transcript, gates, vacuous, reference
    assert checked.stdout.splitlines()[1].split()[2:8] == [
        "-", "completed", "events-jsonl", "1/1", "no", "passes"
    ]  # fmt: skip
