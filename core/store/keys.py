"""Every Redis key evalfleet reads or writes, ours and kombu's, named once (as rq's keys.py).

Ours, under the prefix (no TTL on any of them):

- ``experiments`` zset: experiment id by created time;
- ``exp:{id}`` hash: info, matrix, counts (done, passes, errors, cancelled),
  status, finished_at, ``files``: the manifest of the files shipped with it
  (core.files.bundle), ``chords``: the group ids of the chords its runs were sent
  in (space-separated; their Celery keys go when the experiment is deleted), and
  once every run is on the broker ``sent``: their default queue;
- ``exp:{id}:runs`` run id -> RunResult JSON; ``exp:{id}:specs`` run id ->
  RunSpec JSON (what resume and recovery send again); ``exp:{id}:attempts``
  run id -> deliveries so far; ``exp:{id}:deliveries`` run id -> a JSON list
  of its deliveries (worker, started_at; ended_at and outcome once known), so
  that one that died without a result still shows;
- ``exp:{id}:leases`` run id -> "EXPIRY HOLDER" of the runs in progress
  (core.store.leases);
- ``exp:{id}:resuming`` who is resuming the experiment (host, pid, time), while
  one resume works out what to send and sends it (expires: a killed resume
  holds it no longer than RESUME_HOLD_S);
- ``exp:{id}:unaccounted`` run id -> when a sweep first found the run nowhere
  (fleet.recovery);
- ``exp:{id}:health`` the first results of each tier, for fail-fast (TIER +
  newline: the tier has a result of its own; TIER + newline + REASON: how many
  of its runs ended with that infrastructure error); ``exp:{id}:unrecognised``
  tier -> the transcript format its agent's output was not in (the first run
  that showed it); ``exp:{id}:halted`` tier ->
  the infrastructure error that stopped its runs;
- ``exp:{id}:report`` the ExperimentReport JSON;
- ``exp:{id}:evidence`` run id -> the run's RunEvidence, zlib-compressed JSON
  (core.evidence.models), or ``file:`` and the path of that blob in the
  experiment's artifacts folder; the experiment's hash counts the stored
  bytes under ``evidence_bytes``;
- ``exp:{id}:reports`` version -> an ExperimentReport JSON of a later version
  (rejudge, rescore); version 1 is ``exp:{id}:report``; the ``exp:{id}`` hash
  field ``versions`` counts the versions after the first, and ``superseded`` how many
  of them a resume that ran runs again has left behind (made of the runs before);
- ``exp:{id}:v{N}:runs`` run id -> the RunResult JSON of that run in the later
  version N (``exp:{id}:runs``: version 1's), one hash a version so that its
  follower counts them with HLEN;
- ``exp:{id}:files`` sha256 -> the compressed bytes of one file the experiment
  needs on workers (its manifest names them by digest; workers cache the
  materialised folder by the manifest's digest);
- ``exp:{id}:budget`` the spend ledger (core.store.ledger): per kind (agent, judge)
  ``KIND:limit``, ``KIND:spent``, ``KIND:reserved``, ``KIND:max`` and per tier x
  scenario ``KIND:n:CELL`` / ``KIND:sum:CELL`` of finished runs; ``stopped``: why
  the first reservation that did not fit was refused;
  ``exp:{id}:reservations`` run id -> "AGENT JUDGE" projected dollars it holds;
- ``exp:{id}:waves`` an adaptive experiment's waves (fleet.waves): ``wave``
  the number sent, and per closed tier x scenario cell why it stopped;
- ``exp:{id}:workspaces`` run id -> an ArchivedWorkspace JSON (matrix
  ``workspace_archive:``; what ``scheduler rescore`` runs the gates on);
- ``judgments`` the judgment cache, shared by every experiment under the
  prefix: core.evaluation.judge.cache_key -> a CachedJudgment JSON (README, "Judgment
  cache": removed with ``DEL <prefix>judgments``).

One pub/sub channel, not a key (Redis keeps nothing of it): ``exp:{id}:status``
carries each status the experiment is set to, so that a follower waiting for
the end wakes when it comes instead of at its next poll.

Celery's result keys (celery-task-meta-*, the chord's counters) carry the same
prefix (worker.celery_app). kombu's own keys keep kombu's names: the
recovery sweep and Flower read them as kombu's Redis transport lays them out,
described at the end of this module with the helpers that decode its messages.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from typing import Any

DEFAULT_PREFIX = "evalfleet:"


def key_prefix() -> str:
    """The prefix of our keys and of Celery's result keys (EVALFLEET_KEY_PREFIX), so
    fleets or test sessions sharing one Redis database keep apart what they write."""
    return os.environ.get("EVALFLEET_KEY_PREFIX", DEFAULT_PREFIX)


@dataclass(frozen=True)
class Keys:
    prefix: str

    def experiments(self) -> str:
        return f"{self.prefix}experiments"

    def experiment(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}"

    def runs(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:runs"

    def specs(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:specs"

    def attempts(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:attempts"

    def resuming(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:resuming"

    def deliveries(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:deliveries"

    def leases(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:leases"

    def unaccounted(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:unaccounted"

    def health(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:health"

    def halted(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:halted"

    def unrecognised(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:unrecognised"

    def report(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:report"

    def evidence(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:evidence"

    def reports(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:reports"

    def files(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:files"

    def budget(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:budget"

    def reservations(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:reservations"

    def waves(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:waves"

    def version_runs(self, exp_id: str, version: int) -> str:
        return f"{self.prefix}exp:{exp_id}:v{version}:runs"

    def workspaces(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:workspaces"

    def judgments(self) -> str:
        return f"{self.prefix}judgments"

    def of_experiment(self, exp_id: str) -> tuple[str, str]:
        """SCAN patterns of every key of the experiment: its record and each ``exp:{id}:*``
        (glob characters in the id matched literally)."""
        escaped = re.sub(r"([*?\[\]\\])", r"\\\1", self.experiment(exp_id))
        return escaped, f"{escaped}:*"

    def experiment_of(self, key: str) -> str | None:
        """The experiment id of one of our ``exp:{id}`` or ``exp:{id}:*`` keys, else None."""
        head = f"{self.prefix}exp:"
        return key[len(head) :].split(":", 1)[0] if key.startswith(head) else None

    def chord(self, group_id: str) -> list[str]:
        """Celery's result-backend keys of one chord (the group's meta and the Redis
        backend's .j/.t/.s/.d/.c counters, under our prefix: worker.celery_app)."""
        base = f"{self.prefix}celery-taskset-meta-{group_id}"
        return [base, *(base + suffix for suffix in (".j", ".t", ".s", ".d", ".c"))]

    def status_channel(self, exp_id: str) -> str:
        return f"{self.prefix}exp:{exp_id}:status"


# --- kombu's Redis transport (5.x), unprefixed -----------------------------------------
# A queue is a list under the queue's own name, of JSON messages whose `body` is
# base64 of the task's JSON [args, kwargs, embed]. A message handed to a worker
# and not yet acknowledged moves to UNACKED (delivery tag -> JSON [message,
# exchange, routing key]) and UNACKED_INDEX (delivery tag scored by when it was
# handed out); Redis gives it back after the visibility timeout.
UNACKED = "unacked"
UNACKED_INDEX = "unacked_index"


def queue_key(queue: str) -> str:
    return queue


def message(raw: bytes | str | None) -> Any:
    """A queued message (None when it is not JSON)."""
    try:
        return json.loads(raw) if raw is not None else None
    except ValueError:
        return None


def unacked_message(raw: bytes | str | None) -> Any:
    """The message of an UNACKED entry, [message, exchange, routing key]."""
    entry = message(raw)
    return entry[0] if isinstance(entry, list) and entry else None


def task_args(msg: Any, task: str) -> list[Any] | None:
    """The positional arguments of a JSON message of Celery task `task`, else None."""
    try:
        if msg["headers"]["task"] != task or msg["content-type"] != "application/json":
            return None
        args = json.loads(base64.b64decode(msg["body"]))[0]
    except (ValueError, KeyError, IndexError, TypeError):  # not a task message of ours
        return None
    return args if isinstance(args, list) else None
