"""core.store.keys: every key under the prefix, an experiment's keys found by SCAN even
when its id holds glob characters, and kombu's messages read as its transport lays
them out."""

from __future__ import annotations

import base64
import json

import pytest

from core.evidence.models import RunEvidence
from core.store import Store, keys
from core.store.evidence import EncodedEvidence
from core.store.health import HealthNote
from core.store.keys import Keys, key_prefix, task_args
from tests.support.records import record_experiment, result_of


def test_the_prefix_is_the_environments_else_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_KEY_PREFIX", "fleet-a:")
    assert key_prefix() == "fleet-a:"
    monkeypatch.delenv("EVALFLEET_KEY_PREFIX")
    assert key_prefix() == keys.DEFAULT_PREFIX


def test_experiment_of_reads_the_id_back_from_its_keys_only() -> None:
    named = Keys("p:")
    assert named.experiment_of(named.runs("e-1")) == "e-1"
    assert named.experiment_of(named.experiment("e-1")) == "e-1"
    assert named.experiment_of(named.judgments()) is None
    assert named.experiment_of("other:exp:e-1") is None


def test_every_key_an_experiment_writes_is_found_by_its_patterns(store: Store) -> None:
    info, specs = record_experiment(store, budget={"agent_usd": 5.0})
    store.results.finish(
        result_of(specs[0]),
        health=HealthNote("T0", "boom", 3),
        evidence=EncodedEvidence.of(RunEvidence(experiment_id=info.id, run_id=specs[0].run_id)),
    )
    store.attempts.begin(specs[1], "holder", 60)
    found = {
        k for pattern in store.keys.of_experiment(info.id) for k in store.redis.scan_iter(pattern)
    }
    written = set(store.redis.scan_iter(f"{store.keys.prefix}exp:*"))
    assert written == found
    assert {
        store.keys.runs(info.id),
        store.keys.budget(info.id),
        store.keys.leases(info.id),
        store.keys.health(info.id),
        store.keys.evidence(info.id),
    } <= found


def test_an_id_with_glob_characters_matches_itself_and_no_other(store: Store) -> None:
    record_experiment(store, exp_id="a*")
    record_experiment(store, exp_id="ab")
    found = {
        k for pattern in store.keys.of_experiment("a*") for k in store.redis.scan_iter(pattern)
    }
    assert found and all(store.keys.experiment_of(k) == "a*" for k in found)


def test_a_task_message_gives_its_arguments_and_anything_else_none() -> None:
    body = base64.b64encode(json.dumps([["exp", "run"], {}, {}]).encode()).decode()
    msg = {"headers": {"task": "evalfleet.run"}, "content-type": "application/json", "body": body}
    assert task_args(msg, "evalfleet.run") == ["exp", "run"]
    assert task_args(msg, "evalfleet.aggregate") is None
    assert (
        task_args({**msg, "content-type": "application/x-python-serialize"}, "evalfleet.run")
        is None
    )
    assert task_args({**msg, "body": "not base64 json"}, "evalfleet.run") is None
    assert keys.message(b"{not json") is None
    assert keys.unacked_message(json.dumps([msg, "", "q"])) == msg
    assert keys.unacked_message("[]") is None
