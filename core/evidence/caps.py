"""A run's evidence made fit to store: redacted, then cut to the matrix's caps
(`evidence: {max_item_kb, max_run_kb}`), each cut said once in `cuts`.

Redaction comes first: a cut through the middle of a secret would leave a part
of it that no longer matches. A text over its cap keeps its head and tail
around a marker naming the bytes left out. The run's cap is shared fairly: texts
under an equal share keep all of it, and what they leave is split among the
larger ones. The parsed events count toward the run's cap as a whole and keep
their first and last events. The judge's prompts and answers are texts like the
others; what the judge was shown (its inputs) is kept whole, since rejudge asks
again with it, and counts toward the run's cap. When the experiment's cap is
reached the store keeps `minimal` evidence instead (core.store): without
the judge's record, so rejudge keeps such a run as it was.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from core.evidence.models import Excerpt, GateEvidence, RunEvidence
from core.evidence.redact import redact_record
from core.matrix import EvidenceLimits

CUT_MARKER = "\n[... {} bytes cut ...]\n"


def bounded(evidence: RunEvidence, limits: EvidenceLimits, secrets: Sequence[str]) -> RunEvidence:
    evidence = redact_record(evidence, secrets)
    item_cap = int(limits.max_item_kb * 1024)
    cuts = list(evidence.cuts)
    events, dropped = _events_within(evidence.events, item_cap)
    if dropped:
        cuts.append(f"events: {dropped} events in the middle left out (max_item_kb)")
    texts = _texts(evidence)
    fixed = (_json_size(events) if events else 0) + len(evidence.changes_summary.encode())
    if evidence.judge is not None:  # kept whole: rejudge asks the judge with them again
        fixed += len(evidence.judge.inputs.model_dump_json().encode())
    share = _fair_share(
        [min(t.total, item_cap) for t in texts], int(limits.max_run_kb * 1024) - fixed
    )
    kept: dict[str, Excerpt] = {}
    for text in texts:
        cap, why = (item_cap, "max_item_kb") if item_cap <= share else (share, "max_run_kb")
        kept[text.name] = cut(text.excerpt, cap)
        if kept[text.name].cut > text.excerpt.cut:
            cuts.append(
                f"{text.name}: {text.total} bytes, kept its first and last {cap // 2} ({why})"
            )
    gates = [
        gate.model_copy(update={"output": kept[f"gate {i + 1} output"]})
        for i, gate in enumerate(evidence.gates)
    ]
    verifier = evidence.verifier
    if verifier is not None:
        verifier = verifier.model_copy(update={"output": kept["verifier output"]})
    judge = evidence.judge
    if judge is not None:
        calls = [
            call.model_copy(
                update={
                    "prompt": kept[f"judge call {i + 1} prompt"],
                    "raw_answer": kept.get(f"judge call {i + 1} answer", call.raw_answer),
                }
            )
            for i, call in enumerate(judge.calls)
        ]
        judge = judge.model_copy(update={"calls": calls})
    return evidence.model_copy(
        update={
            "stdout": kept["stdout"],
            "stderr": kept["stderr"],
            "transcript": kept["transcript"],
            "patch": kept["patch"],
            "gates": gates,
            "verifier": verifier,
            "judge": judge,
            "events": events,
            "cuts": cuts,
        }
    )


def minimal(evidence: RunEvidence, note: str) -> RunEvidence:
    """What is kept of a run once the experiment's evidence is at its cap: gates'
    commands and exit codes, the changes summary, phases and attempts (not the
    judge's inputs: tens of KB a run, which the cap is there to stop)."""
    return RunEvidence(
        experiment_id=evidence.experiment_id,
        run_id=evidence.run_id,
        gates=[GateEvidence(command=g.command, exit_code=g.exit_code) for g in evidence.gates],
        verifier=None
        if evidence.verifier is None
        else GateEvidence(command=evidence.verifier.command, exit_code=evidence.verifier.exit_code),
        changes_summary=evidence.changes_summary,
        phases=evidence.phases,
        attempts=evidence.attempts,
        cuts=[note],
    )


def cut(excerpt: Excerpt, limit: int) -> Excerpt:
    """The excerpt within `limit` bytes of text: its head and tail around a marker."""
    data = excerpt.text.encode()
    if len(data) <= limit:
        return excerpt
    half = max(limit // 2, 0)
    head = data[:half].decode("utf-8", "ignore")
    tail = data[len(data) - (limit - half) :].decode("utf-8", "ignore") if limit > half else ""
    left_out = len(data) - len(head.encode()) - len(tail.encode())
    return Excerpt(
        text=head + CUT_MARKER.format(left_out) + tail,
        total_bytes=excerpt.total_bytes,
        cut=excerpt.cut + left_out,
    )


class _Text:
    def __init__(self, name: str, excerpt: Excerpt):
        self.name, self.excerpt = name, excerpt
        self.total = len(excerpt.text.encode())


def _texts(evidence: RunEvidence) -> list[_Text]:
    named = [
        ("stdout", evidence.stdout),
        ("stderr", evidence.stderr),
        ("transcript", evidence.transcript),
        ("patch", evidence.patch),
    ]
    named += [(f"gate {i + 1} output", g.output) for i, g in enumerate(evidence.gates)]
    if evidence.verifier is not None:
        named.append(("verifier output", evidence.verifier.output))
    for i, call in enumerate(evidence.judge.calls if evidence.judge is not None else []):
        named.append((f"judge call {i + 1} prompt", call.prompt))
        if call.raw_answer is not None:
            named.append((f"judge call {i + 1} answer", call.raw_answer))
    return [_Text(name, excerpt) for name, excerpt in named]


def _fair_share(sizes: list[int], budget: int) -> int:
    """The most any one text may keep so that all of them fit `budget`: the
    smaller ones whole, the rest an equal part of what is left."""
    remaining = max(budget, 0)
    ordered = sorted(sizes)
    for index, size in enumerate(ordered):
        share = remaining // (len(ordered) - index)
        if size > share:
            return share
        remaining -= size
    return max(ordered, default=0)


def _events_within(events: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """The first and last events whose JSON fits `limit`, and how many were left out.
    A long text inside an event (a message, a command) keeps its head and tail."""
    events = [_short_fields(event, limit // 4) for event in events]
    if _json_size(events) <= limit:
        return events, 0
    head: list[dict[str, Any]] = []
    tail: list[dict[str, Any]] = []
    size, low, high = 2, 0, len(events) - 1
    while low <= high:
        take_head = len(head) <= len(tail)
        event = events[low] if take_head else events[high]
        grown = size + _json_size(event) + 1
        if grown > limit:
            break
        size = grown
        if take_head:
            head.append(event)
            low += 1
        else:
            tail.append(event)
            high -= 1
    dropped = len(events) - len(head) - len(tail)
    return [*head, {"type": "cut", "events": dropped}, *reversed(tail)], dropped


def _short_fields(event: dict[str, Any], limit: int) -> dict[str, Any]:
    return {
        name: cut(Excerpt(text=value), limit).text if isinstance(value, str) else value
        for name, value in event.items()
    }


def _json_size(value: Any) -> int:
    return len(json.dumps(value).encode())
