"""`judge: {repeats: 3}` through the CLI with real workers: the judge-noise section's
numbers match a hand computation, and a difference within the judge's noise is flagged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import StartWorker, run_cli
from tests.support.experiments import judged_matrix
from tests.support.llm_stub import LLMStub, scripted_judge

pytestmark = pytest.mark.integration

# Each run's three judgments (tier, run index) -> scores; the runs' means and
# within-run sample variances, by hand:
#   T0: [.6 .8 .7] m .7 v .01 | [.5 .5 .8] m .6 v .03 | [.8 .8 .8] m .8 v 0
#   T1: [.7 .9 .8] m .8 v .01 | [.9 .9 .6] m .8 v .03 | [.6 .6 .6] m .6 v 0
SCORES = {
    "run=T0/0;": [0.6, 0.8, 0.7],
    "run=T0/1;": [0.5, 0.5, 0.8],
    "run=T0/2;": [0.8, 0.8, 0.8],
    "run=T1/0;": [0.7, 0.9, 0.8],
    "run=T1/1;": [0.9, 0.9, 0.6],
    "run=T1/2;": [0.6, 0.6, 0.6],
}
JUDGE_VARIANCE = (0.01 + 0.03 + 0.0) / 3  # both tiers
JUDGE_SD_OF_MEAN = math.sqrt(JUDGE_VARIANCE / 3)  # 0.0667
# Sample variance of the run means: T0 (.7 .6 .8) .01; T1 (.8 .8 .6) .04 / 3.
RUN_VARIANCE = {"T0": 0.01, "T1": 0.04 / 3}


def test_repeats_3_gives_the_judge_noise_section_of_a_hand_computation(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=2)
    with LLMStub([scripted_judge(SCORES)]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url)
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
        assert len(stub.requests) == 18  # 6 runs x 3 judgments
    report = json.loads(done.stdout)
    judge = report["judge"]
    assert (judge["judgments"], judge["cached"]) == (18, 0)
    for tier, run_variance in RUN_VARIANCE.items():
        noise = judge["tiers"][tier]
        assert (noise["judged_runs"], noise["repeats"]) == (3, 3)
        assert noise["judge_variance"] == pytest.approx(JUDGE_VARIANCE)
        assert noise["judge_sd_of_mean"] == pytest.approx(JUDGE_SD_OF_MEAN)
        assert noise["run_variance"] == pytest.approx(run_variance)
        assert noise["judge_share"] == pytest.approx(JUDGE_VARIANCE / 3 / run_variance)
    # Composites (pass + judge score) / 2: T0 .85 .30 .90 (median .85), T1 .90 .90 .30
    # (median .90). Δ .05 < 2 x 0.5 x sqrt(2) x .0667 = .0943: within the judge's noise.
    [flag] = judge["within_noise"]
    assert flag["tier"] == "T1"
    assert flag["difference"] == pytest.approx(0.05)
    assert flag["band"] == pytest.approx(2 * 0.5 * math.hypot(JUDGE_SD_OF_MEAN, JUDGE_SD_OF_MEAN))
    assert flag["uplift"] == pytest.approx(0.05 / 0.85)
    assert flag["verdict"] == "no significant difference"  # 3 runs a tier prove nothing

    exp_id = report["experiment"]["id"]
    shown = run_cli("report", exp_id, "--format", "markdown", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout[shown.stdout.index("Judge noise") :]
    assert "| T0 | 3 | 3 | 0.0133 | 0.0667 | 0.0100 | 0.444 |" in section
    assert "18 judgments, 0 from cache" in section
    assert (
        "T1: uplift +5.9%, Δ median composite +0.050, lies within the judge's noise (less than "
        "2 judge SDs of the difference, 0.0943)"
    ) in section
    github = run_cli("report", exp_id, "--format", "github", env=fleet_env).stdout
    assert "- T1: uplift +5.9%, Δ median composite +0.050, lies within the judge's noise" in github
    # The original report says so in every format that has notes.
    table = run_cli("report", exp_id, "--full", env=fleet_env).stdout
    assert "Judge noise" in table and "18 judgments, 0 from cache" in table
