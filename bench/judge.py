"""Judge throughput: N judge calls against a loopback stub answering after 50 ms.

The stub is the test suite's OpenAI-compatible server (tests.support.llm_stub, a
separate process); each call is a full `core.evaluation.judge.judge_run`: prompt with a
transcript, HTTP, answer parsing and validation, weighted score. C calls are
in flight at once (threads, as C worker processes would each judge one run);
the ideal is N * 50 ms / C.

    python bench/judge.py [--calls 1000] [--concurrency 16] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support import ROOT, show

from core.evaluation.judge import Judge, judge_run
from core.evidence.models import Excerpt, JudgeInputs
from core.matrix import JudgeConfig, Rubric, ScenarioJudge
from core.results.run import GateResult, JudgeResult

CRITERIA = {"correctness": 0.5, "completion": 0.3, "efficiency": 0.2}
ANSWER = {
    "scores": {"correctness": 0.9, "completion": 0.8, "efficiency": 0.7},
    "weighted_score": 0.83,
    "confidence": 0.8,
    "issues": ["retried one command"],
    "highlights": ["checked its work"],
}
# A transcript of a typical size: a few dozen commands and their output.
TRANSCRIPT = "\n".join(
    f"$ my-tool create --title 'note {i}' --tag rust\ncreated note {i} (id n{i})" for i in range(60)
)


def start_stub(folder: Path, latency_s: float) -> tuple[subprocess.Popen[str], str]:
    script = folder / "steps.json"
    step = {"reply": {"content": json.dumps(ANSWER), "prompt_tokens": 3000}, "delay_s": latency_s}
    script.write_text(json.dumps([step]))
    stub = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "llm_stub.py"),
            "--port",
            "0",
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stub.stdout is not None
    line = stub.stdout.readline()
    if not line.startswith("LISTENING "):
        stub.kill()
        raise RuntimeError(f"the LLM stub did not start: {line!r}")
    return stub, line.split()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rubric_file = folder / "rubric.yaml"
        criteria = [{"id": k, "weight": w, "description": k} for k, w in CRITERIA.items()]
        rubric_file.write_text(json.dumps({"criteria": criteria}))
        rubric = Rubric.model_validate({"criteria": criteria})
        scenario = ScenarioJudge(rubric=rubric_file, pass_threshold=0.7)
        stub, base_url = start_stub(folder, latency_s)
        config = JudgeConfig(base_url=base_url, model="judge-stub", api_key_env=None)
        gates = [GateResult(gate_type="command_succeeds", passed=True, message="exit 0")]

        def call(_: int) -> JudgeResult:
            return judge_run(
                Judge(config, scenario, rubric, api_key=None),
                JudgeInputs(
                    task_prompt="Create three notes about Rust.",
                    transcript_text=Excerpt.whole(TRANSCRIPT),
                    changes_summary="A .my-tool/store.json",
                ),
                gates=gates,
            ).result

        try:
            call(0)  # warm up: imports, first connection
            started = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                results = list(pool.map(call, range(args.calls)))
            elapsed = time.perf_counter() - started
        finally:
            stub.terminate()
            stub.wait()

    failed = [r.error for r in results if r.weighted_score is None]
    latencies = sorted(r.latency_ms or 0.0 for r in results)
    ideal = args.calls * latency_s / args.concurrency
    title = f"judge: {args.calls} calls, {args.concurrency} at once, {args.latency_ms:g} ms latency"
    show(
        title,
        {
            "elapsed": f"{elapsed:.2f} s  {args.calls / elapsed:.0f} calls/s",
            "ideal (calls x latency / concurrency)": f"{ideal:.2f} s  {args.calls / ideal:.0f}/s",
            "call latency p50 / p95": (
                f"{statistics.median(latencies):.0f} / "
                f"{latencies[int(len(latencies) * 0.95) - 1]:.0f} ms"
            ),
            "failed calls": f"{len(failed)}" + (f" (first: {failed[0]})" if failed else ""),
            "ratio (ideal / elapsed)": f"{ideal / elapsed:.2f}",
        },
    )


if __name__ == "__main__":
    main()
