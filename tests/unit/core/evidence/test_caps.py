"""Evidence within its caps: each text keeps its head and tail with a marker, the
run's cap is shared fairly, events keep their first and last, every cut is said
once, and redaction comes before any cut."""

from __future__ import annotations

from core.evidence.caps import bounded, cut, minimal
from core.evidence.models import (
    Excerpt,
    GateEvidence,
    JudgeCall,
    JudgeEvidence,
    JudgeInputs,
    RunEvidence,
)
from core.evidence.redact import MARKER
from core.matrix import EvidenceLimits


def evidence(**texts: str) -> RunEvidence:
    return RunEvidence(
        experiment_id="e",
        run_id="e:T0:s:0",
        **{name: Excerpt.whole(text) for name, text in texts.items()},
    )


def test_a_cut_keeps_head_and_tail_around_a_marker_and_counts_what_it_left_out() -> None:
    text = "A" * 600 + "B" * 400
    kept = cut(Excerpt.whole(text), 100)
    assert kept.text == "A" * 50 + "\n[... 900 bytes cut ...]\n" + "B" * 50
    assert (kept.total_bytes, kept.cut) == (1000, 900)
    assert cut(Excerpt.whole("short"), 100) == Excerpt.whole("short")


def test_a_cut_never_splits_a_character() -> None:
    kept = cut(Excerpt.whole("é" * 100), 51)  # two bytes each
    head, tail = kept.text.split("\n[... ")[0], kept.text.split("cut ...]\n")[1]
    assert set(head + tail) == {"é"}
    assert kept.cut == 200 - len((head + tail).encode())


def test_each_text_keeps_at_most_its_item_cap_and_the_run_shares_what_is_left() -> None:
    limits = EvidenceLimits(max_item_kb=4, max_run_kb=5)
    kept = bounded(evidence(stdout="o" * 10_000, stderr="e" * 300, patch="p" * 10_000), limits, [])
    # stderr fits whole; stdout and patch share the rest of 5 KB equally.
    assert kept.stderr.text == "e" * 300
    share = (5 * 1024 - 300) // 2
    for text in (kept.stdout, kept.patch):
        assert text.cut == 10_000 - share and text.total_bytes == 10_000
    assert kept.cuts == [
        f"stdout: 10000 bytes, kept its first and last {share // 2} (max_run_kb)",
        f"patch: 10000 bytes, kept its first and last {share // 2} (max_run_kb)",
    ]
    roomy = bounded(evidence(stdout="o" * 10_000), EvidenceLimits(max_item_kb=4), [])
    assert roomy.stdout.cut == 10_000 - 4096
    assert roomy.cuts == ["stdout: 10000 bytes, kept its first and last 2048 (max_item_kb)"]


def test_gate_outputs_are_capped_like_any_text() -> None:
    run = evidence().model_copy(
        update={"gates": [GateEvidence(command="make test", output=Excerpt.whole("x" * 5000))]}
    )
    [gate] = bounded(run, EvidenceLimits(max_item_kb=1), []).gates
    assert gate.command == "make test" and gate.output.cut == 5000 - 1024


def test_a_secret_across_the_cut_is_redacted_before_it_can_be_split() -> None:
    secret = "sk-very-secret-token-0123456789"
    text = "x" * 990 + secret + "y" * 990
    kept = bounded(evidence(stdout=text), EvidenceLimits(max_item_kb=1), [secret])
    assert "sk-" not in kept.stdout.text and "0123456789" not in kept.stdout.text
    assert kept.stdout.total_bytes == len(text)  # what the agent printed, not the redacted size


def test_events_keep_their_first_and_last_and_say_how_many_were_left_out() -> None:
    events = [{"type": "tool_call", "command": f"step {i}", "exit_code": 0} for i in range(500)]
    run = evidence().model_copy(update={"events": events})
    kept = bounded(run, EvidenceLimits(max_item_kb=2), []).events
    marker = next(e for e in kept if e["type"] == "cut")
    head, tail = kept[: kept.index(marker)], kept[kept.index(marker) + 1 :]
    assert head[0]["command"] == "step 0" and tail[-1]["command"] == "step 499"
    assert len(head) + len(tail) + marker["events"] == 500
    assert abs(len(head) - len(tail)) <= 1


def test_minimal_evidence_keeps_what_locates_the_failure_and_says_why() -> None:
    run = evidence(stdout="o" * 100).model_copy(
        update={
            "gates": [GateEvidence(command="pytest", exit_code=1, output=Excerpt.whole("F"))],
            "changes_summary": "1 added",
            "phases": {"agent": 2.0},
        }
    )
    small = minimal(run, "cap reached")
    assert small.stdout.text == "" and small.changes_summary == "1 added"
    assert [(g.command, g.exit_code, g.output.text) for g in small.gates] == [("pytest", 1, "")]
    assert (small.phases, small.cuts) == ({"agent": 2.0}, ["cap reached"])
    assert MARKER not in small.model_dump_json()


def test_the_judges_prompts_and_answers_are_capped_but_what_it_was_shown_is_kept_whole() -> None:
    shown = JudgeInputs(task_prompt="write notes", transcript_text=Excerpt.whole("t" * 3000))
    calls = [
        JudgeCall(model="j", prompt=Excerpt.whole("p" * 5000), raw_answer=Excerpt.whole("{}"))
        for _ in range(2)
    ]
    run = evidence().model_copy(update={"judge": JudgeEvidence(inputs=shown, calls=calls)})
    kept = bounded(run, EvidenceLimits(max_item_kb=1), [])
    assert kept.judge is not None and kept.judge.inputs == shown  # rejudge asks with it
    assert [c.prompt.cut for c in kept.judge.calls] == [5000 - 1024] * 2
    assert [c.raw_answer for c in kept.judge.calls] == [Excerpt.whole("{}")] * 2
    assert "judge call 2 prompt: 5000 bytes, kept its first and last 512 (max_item_kb)" in (
        kept.cuts
    )
