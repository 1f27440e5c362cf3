"""Evidence in Redis: the bytes a run's evidence adds, for a 200 KB transcript.

Each run's agent leaves a 200 KB events transcript (LLM calls, tool calls,
assistant messages of words drawn from a small vocabulary: somewhat more
compressible than a real one) and a little stdout; one gate runs. The same
experiment is run with the default caps (each text cut to 64 KB, 256 KB a
run), with caps roomy enough to keep the whole transcript, and with a 2 KB
transcript. Figures per run: the stored RunResult, the evidence as stored
(compressed), the record of deliveries, and Redis's own memory growth with and
without the evidence (its hash deleted afterwards).

    python bench/evidence_bytes.py [--runs 20] [--transcript-kb 200]
"""

from __future__ import annotations

import argparse
import json
import random

from support import (
    Fleet,
    private_fleet,
    require_bash,
    show,
    submit,
    wait_for_report,
    write_matrix,
)

VOCABULARY = (
    "the agent reads file notes create list update delete test passes fails error retry "
    "command output json path value check summary draft final result workspace module "
    "function class import return config yaml matrix tier scenario gate judge score"
)
WORDS = VOCABULARY.split()


def transcript(size: int, seed: int = 7) -> str:
    """Events-jsonl lines of a plausible agent session, `size` bytes or a little more."""
    rng = random.Random(seed)
    lines: list[str] = []
    total = step = 0
    while total < size:
        step += 1
        title = " ".join(rng.choice(WORDS) for _ in range(5))
        events = [
            {
                "type": "llm_call",
                "input_tokens": 1000 + 150 * step,
                "output_tokens": 80,
                "latency_ms": rng.randint(300, 2000),
                "tool_calls": 1,
                "model": "m",
            },
            {"type": "tool_call", "id": f"c{step}", "command": f"my-tool create --title '{title}'"},
            {"type": "tool_result", "id": f"c{step}", "exit_code": rng.choice([0, 0, 0, 1])},
            {
                "type": "message",
                "role": "assistant",
                "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80))),
            },
        ]
        for event in events:
            lines.append(json.dumps(event))
            total += len(lines[-1]) + 1
    return "\n".join(lines) + "\n"


def measure(fleet: Fleet, name: str, kb: int, runs: int, extra: str) -> dict[str, str]:
    source = fleet.folder / f"{name}.jsonl"
    source.write_text(transcript(kb * 1024))
    command = f'cp {source} "$EVALFLEET_EVENTS"; echo "done: wrote the notes"; touch out.txt'
    gates = "[{type: command_succeeds, command: 'ls -la'}]"
    matrix = write_matrix(
        fleet.folder, command=command, runs=runs, name=name, extra=extra, gates=gates
    )
    redis, keys = fleet.store.redis, fleet.store.keys
    exp_id = submit(fleet, matrix)
    wait_for_report(fleet.store, exp_id, timeout_s=600)

    def stored(key: str) -> int:
        return sum(redis.hstrlen(key, field) for field in redis.hkeys(key))

    def memory(*names: str) -> int:
        """Redis's own figure for the keys, overhead included (every element counted)."""
        return sum(redis.memory_usage(name, samples=0) or 0 for name in names)

    sample = fleet.store.evidence.get(exp_id, f"{exp_id}:T0:s0:0")
    assert sample is not None
    others = [
        keys.experiment(exp_id),
        keys.runs(exp_id),
        keys.specs(exp_id),
        keys.attempts(exp_id),
        keys.deliveries(exp_id),
        keys.report(exp_id),
    ]
    without = memory(*others)
    with_evidence = without + memory(keys.evidence(exp_id))
    cut = f" ({sample.transcript.cut:,} cut)" if sample.transcript.cut else ""
    return {
        "transcript as the agent wrote it": f"{source.stat().st_size:,} bytes",
        "transcript kept": f"{len(sample.transcript.text.encode()):,} bytes{cut}",
        "RunResult JSON per run": f"{stored(keys.runs(exp_id)) / runs:,.0f} bytes",
        "evidence per run, compressed": f"{stored(keys.evidence(exp_id)) / runs:,.0f} bytes",
        "deliveries record per run": f"{stored(keys.deliveries(exp_id)) / runs:,.0f} bytes",
        "Redis bytes per run, without evidence": f"{without / runs:,.0f}",
        "Redis bytes per run, with evidence": f"{with_evidence / runs:,.0f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--transcript-kb", type=int, default=200)
    args = parser.parse_args()
    require_bash()
    kb = args.transcript_kb
    roomy = f"evidence: {{max_item_kb: {2 * kb}, max_run_kb: {4 * kb}}}"
    cases = [
        (f"{kb} KB transcript, default caps (64 KB a text, 256 KB a run)", "defaults", kb, ""),
        (f"{kb} KB transcript, caps that keep it whole", "roomy", kb, roomy),
        ("2 KB transcript, default caps", "small", 2, ""),
    ]
    with private_fleet() as fleet:
        fleet.start_workers(2)
        for title, name, size, extra in cases:
            show(f"{title}: {args.runs} runs", measure(fleet, name, size, args.runs, extra))


if __name__ == "__main__":
    main()
