"""A benchmark task's verifier (core.matrix.task.Verifier): its command, run once the
agent has ended in the run's environment with the tests at /tests, and the rewards
it leaves.

Pure of Celery and of any sandbox: the caller says how a command runs in its
run's environment (a bwrap jail, a container), with cwd the task's workdir, /tests
and /logs in place, and where /logs/verifier is on this machine, emptied of what
the agent may have left there. Harbor's tests write /logs/verifier/reward.txt (one
number) or reward.json (named numbers); Terminal-Bench's pass by their exit code.

Whatever the verifier does (no reward file, a malformed one, a timeout) is the
task's verdict on the run, said in `failure`: a failed run, never a crash.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.evaluation.gates import command_evidence
from core.evaluation.shell import ShellResult
from core.evidence.models import GateEvidence
from core.matrix import VERIFIER_LOGS, Verifier

# Runs `command` in the run's environment with `timeout_s` and these variables added
# to the run's: the sandbox's part of a verifier.
RunInEnvironment = Callable[[str, float, Mapping[str, str]], ShellResult]

# How the fail reason of rewards below a task's pass_reward begins (rejudge tells it
# from the agent's own reasons).
REWARD_BELOW = "reward "
# As a gate's (core.evaluation.gates): room for a test runner's whole report.
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# A reward file is a few bytes; a larger one is not read whole.
MAX_REWARD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Verification:
    """The verifier's verdict: its rewards by name (`reward` for reward.txt, `tests`
    by exit code), or why it gave none (`failure`); what it ran and printed
    (`evidence`, shown beside the gates'); `error` when its command could not be
    started at all, which is the machine's failure, not the run's."""

    rewards: dict[str, float]
    failure: str | None
    evidence: GateEvidence
    error: str | None = None

    def unmet(self, pass_reward: float) -> str | None:
        """Why this verdict does not pass a run, else None."""
        return self.error or self.failure or below(self.rewards, pass_reward)


def below(rewards: Mapping[str, float], pass_reward: float) -> str | None:
    """The rewards under `pass_reward`, as a fail reason; None when none is."""
    # A verifier's one reward is named `reward`: "reward reward 0" says it twice.
    low = [
        f"{name} {r:g}" if name != "reward" else f"{r:g}"
        for name, r in rewards.items()
        if r < pass_reward
    ]
    return f"{REWARD_BELOW}{', '.join(low)} < {pass_reward:g} (pass_reward)" if low else None


@dataclass(frozen=True)
class RunEnvironment:
    """A run's environment as its verifier needs it: how a command runs in it, and
    where its /logs/verifier is on this machine (emptied by the caller)."""

    run: RunInEnvironment
    rewards_dir: Path


def verify(verifier: Verifier, environment: RunEnvironment) -> Verification:
    out = environment.run(verifier.command, verifier.timeout_s, verifier.env)
    evidence = command_evidence(verifier.command, out)
    if out.error is not None:
        return Verification({}, None, evidence, error=f"the verifier could not run: {out.error}")
    if out.timed_out:
        return Verification({}, f"verifier timed out after {verifier.timeout_s:g} s", evidence)
    if verifier.reward == "exit_code":
        return Verification({"tests": 1.0 if out.exit_code == 0 else 0.0}, None, evidence)
    rewards, failure = read_rewards(environment.rewards_dir)
    return Verification(rewards, failure, evidence)


def read_rewards(folder: Path) -> tuple[dict[str, float], str | None]:
    """The rewards a verifier wrote in `folder` (its /logs/verifier): reward.txt's
    number as `reward`, else reward.json's numbers by name (an object or a list, a
    `details` of the verifier's, ignored); else none, and why. A value that looks like
    a reward but is none (NaN, "0", null, true) is the verifier's failure, not left out:
    the run would pass on the others."""
    text_file, json_file = folder / "reward.txt", folder / "reward.json"
    if text_file.is_file():
        text = _read(text_file)
        number = _number(text.strip())
        if number is None:
            return {}, f"verifier: reward.txt holds {_shown(text)}, not a number"
        return {"reward": number}, None
    if json_file.is_file():
        text = _read(json_file)
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return {}, f"verifier: reward.json is not JSON ({exc}): {_shown(text)}"
        if not isinstance(document, dict):
            return {}, f"verifier: reward.json holds {_shown(text)}, not an object of numbers"
        rewards: dict[str, float] = {}
        for name, value in document.items():
            if isinstance(value, dict | list):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                return {}, f"verifier: reward.json's {name!r} holds {value!r}, not a number"
            if not math.isfinite(value):
                return {}, f"verifier: reward.json's {name!r} holds {value!r}, not a number"
            rewards[str(name)] = float(value)
        if not rewards:
            return {}, f"verifier: reward.json holds no number: {_shown(text)}"
        return rewards, None
    return {}, f"verifier: no {VERIFIER_LOGS}/reward.txt or reward.json"


def _read(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(MAX_REWARD_BYTES).decode("utf-8", errors="replace")


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _shown(text: str, limit: int = 80) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
