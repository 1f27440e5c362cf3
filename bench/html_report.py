"""The HTML report of a 1,000-run experiment with evidence: how long it takes to write,
how big it is, and how fast it opens and filters in headless Chromium.

5 tiers x 8 scenarios x 25 runs, stored as workers store them (RunResults and, per
run, a RunEvidence of typical size: a 24 KB transcript, 60 parsed events, stdout
and stderr tails, two gates) on a private Redis; then, as a user runs it,
`scheduler report EXP --format html`. Figures (target: open and filter < 2 s):

- write: the CLI's wall time (reading runs and evidence, compressing, writing);
- open: from navigation start to the run table laid out (performance.now in
  the page), filter: choosing a tier, a scenario, an outcome, and clearing them,
  each until laid out; open a run: click to its evidence laid out. Medians of
  --repeat page loads (each a fresh Chromium).

    python bench/html_report.py [--runs-per-cell 25] [--repeat 3]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from support import SCHEDULER, private_fleet, show, write_matrix

from core.evidence.models import Excerpt, GateEvidence, RunEvidence
from core.matrix import load_matrix
from core.results.run import GateResult, RunResult, RunStatus
from core.store import Store
from fleet.finish import finish_experiment
from scheduler.plan import experiment_info, new_experiment_id, plan

TARGET_S = 2.0
TIERS, SCENARIOS = 5, 8
TRANSCRIPT = "".join(
    json.dumps({"type": "assistant", "text": f"step {i}: running the tool on note {i}"}) + "\n"
    for i in range(400)
)[: 24 * 1024]

# Appended to the page: acts as a reader would and times each step as laid out.
_TIME = """<script>
(async () => {
  const settle = () => document.body.offsetHeight;
  settle();
  const t = {open_ms: performance.now(), filter_ms: []};
  const choose = (name, value) => {
    const select = document.querySelector(`#runs select[name=${name}]`);
    const start = performance.now();
    select.value = value;
    select.dispatchEvent(new Event("change"));
    settle();
    t.filter_ms.push(performance.now() - start);
  };
  choose("tier", "T3"); choose("scenario", "s5"); choose("outcome", "failed");
  choose("tier", ""); choose("scenario", ""); choose("outcome", "");
  const detail = document.getElementById("run-detail");
  const start = performance.now();
  document.querySelector("#runs-body tr.run").click();
  await new Promise(done => new MutationObserver((_, seen) => {
    if (detail.dataset.run !== undefined) { seen.disconnect(); done(); }
  }).observe(detail, {attributes: true}));
  settle();
  t.open_run_ms = performance.now() - start;
  t.width = document.documentElement.scrollWidth;
  const out = document.createElement("pre");
  out.id = "timing";
  out.textContent = JSON.stringify(t);
  document.body.appendChild(out);
})();
</script>"""


def seed(store: Store, folder: Path, runs_per_cell: int) -> str:
    """A finished experiment: one run in four fails its gate, one in ten is an agent error."""
    matrix_file = write_matrix(
        folder, command="true", runs=runs_per_cell, tiers=TIERS, scenarios=SCENARIOS
    )
    matrix = load_matrix(matrix_file)
    exp_id = new_experiment_id(matrix)
    specs = list(plan(matrix, exp_id))
    store.experiments.create(experiment_info(matrix, exp_id, len(specs)), matrix, specs)
    for spec in specs:
        i = spec.run_index
        status = RunStatus.agent_error if i % 10 == 9 else RunStatus.completed
        passed = status is RunStatus.completed and i % 4 != 1
        gates = [
            GateResult(gate_type="file_exists", name="out", passed=True, message="found"),
            GateResult(gate_type="command_succeeds", name="tests", passed=passed, message="exit"),
        ]
        store.results.save(
            RunResult(
                experiment_id=exp_id,
                run_id=spec.run_id,
                tier=spec.tier,
                scenario=spec.scenario,
                run_index=i,
                status=status,
                passed=passed,
                pass_rate=float(passed),
                composite_score=0.9 if passed else 0.2,
                fail_reason=None if passed else "gates failed: tests",
                cost_usd=0.01 + 0.0001 * i,
                duration_seconds=30.0 + i,
                gates=gates,
                gates_total=2,
                gates_passed=1 + passed,
            )
        )
        store.evidence.save(_evidence(exp_id, spec.run_id, passed))
    finish_experiment(store, exp_id)
    return exp_id


def _evidence(exp_id: str, run_id: str, passed: bool) -> RunEvidence:
    tail = "".join(f"line {k} of the agent's output for {run_id}\n" for k in range(50))
    events: list[dict[str, Any]] = []
    for k in range(20):
        events += [
            {"type": "llm_call", "input_tokens": 1000 + 200 * k, "output_tokens": 120},
            {
                "type": "tool_call",
                "command": f"notes add 'note {k}'",
                "exit_code": 0,
                "output": f"added note {k}",
            },
            {"type": "message", "role": "assistant", "text": f"Added note {k}; next."},
        ]
    return RunEvidence(
        experiment_id=exp_id,
        run_id=run_id,
        stdout=Excerpt(text=tail, total_bytes=len(tail)),
        stderr=Excerpt(text=tail, total_bytes=len(tail)),
        transcript=Excerpt(text=TRANSCRIPT, total_bytes=len(TRANSCRIPT)),
        events=events,
        gates=[
            GateEvidence(output=Excerpt(text="out.txt", total_bytes=7)),
            GateEvidence(
                command="pytest -q tests/",
                exit_code=0 if passed else 1,
                output=Excerpt(text=tail[:600], total_bytes=600),
            ),
        ],
        phases={"setup": 0.4, "agent": 28.0, "gates": 1.5},
    )


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    raise SystemExit("this benchmark needs Chromium (chromium, chromium-browser, google-chrome)")


def measure(browser: str, page: Path, folder: Path) -> dict[str, Any]:
    """One fresh headless Chromium at 1280 px loading the page with the timing script."""
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,1000",
            "--virtual-time-budget=30000",
            "--disable-background-networking",
            f"--user-data-dir={folder}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    found = re.search(r'<pre id="timing">(.*?)</pre>', dom, re.DOTALL)
    if not found:
        raise RuntimeError(f"the page did not report its timing: {dom[-500:]}")
    timing: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-cell", type=int, default=25, help="5 tiers x 8 scenarios")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    total = TIERS * SCENARIOS * args.runs_per_cell
    browser = chromium()

    with private_fleet() as fleet:
        exp_id = seed(fleet.store, fleet.folder, args.runs_per_cell)
        env = {**os.environ, "EVALFLEET_BROKER_URL": fleet.url}
        started = time.perf_counter()
        written = subprocess.run(
            [SCHEDULER, "report", exp_id, "--format", "html"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        write_s = time.perf_counter() - started

    with tempfile.TemporaryDirectory(prefix="evalfleet-html-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(written.replace("</body>", _TIME + "</body>"), encoding="utf-8")
        runs = [measure(browser, page, Path(tmp) / f"profile{k}") for k in range(args.repeat)]

    open_ms = statistics.median(r["open_ms"] for r in runs)
    filter_ms = statistics.median(max(r["filter_ms"]) for r in runs)
    open_run_ms = statistics.median(r["open_run_ms"] for r in runs)
    show(
        f"html report: {total} runs with evidence, Chromium at 1280 px, median of {args.repeat}",
        {
            "write (`scheduler report --format html`)": f"{write_s:.2f} s",
            "page size": f"{len(written.encode()) / 1e6:.1f} MB "
            f"({len(written.encode()) / total / 1024:.1f} KB per run)",
            "open (navigation start -> table laid out)": f"{open_ms:.0f} ms  "
            f"(target < {TARGET_S * 1000:.0f} ms)",
            "filter (slowest of 6 changes)": f"{filter_ms:.0f} ms  "
            f"(target < {TARGET_S * 1000:.0f} ms)",
            "open a run (click -> evidence laid out)": f"{open_run_ms:.0f} ms",
            "page width at 1280 px": f"{max(r['width'] for r in runs)} px",
            "ratios": f"open {open_ms / (TARGET_S * 1000):.2f} of its budget, "
            f"filter {filter_ms / (TARGET_S * 1000):.2f}",
        },
    )


if __name__ == "__main__":
    main()
