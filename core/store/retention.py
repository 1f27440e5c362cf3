"""Retention: what each experiment takes in Redis, and removing experiments whole
(their evidence files in an artifacts folder included).

An experiment's keys are found by SCAN (Keys.of_experiment in core.store.keys), not by a
list of kinds, so a key kind added later is removed too; Celery's chord keys of
its runs are named by the chord ids its record keeps.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.store import Store, scripts
from core.store.client import SCAN_COUNT

DELETE_BATCH = 500


def experiment_keys(store: Store, exp_id: str, chords: str | None = None) -> list[str]:
    """Every key of the experiment that exists: its own and its chords' Celery keys
    (`chords`: the ids its record keeps, when the record was read already)."""
    found: list[str] = []
    for pattern in store.keys.of_experiment(exp_id):
        found += store.redis.scan_iter(match=pattern, count=SCAN_COUNT)
    if chords is None:
        chords = store.redis.hget(store.keys.experiment(exp_id), "chords") or ""
    celery = [key for group in chords.split() for key in store.keys.chord(group)]
    if celery:
        pipe = store.redis.pipeline(transaction=False)
        for key in celery:
            pipe.exists(key)
        found += [key for key, there in zip(celery, pipe.execute(), strict=True) if there]
    return found


@dataclass(frozen=True)
class Deleted:
    keys: int
    files: int  # evidence files removed from the artifacts folder
    unreachable: list[Path]  # evidence files this machine could not remove


def delete_experiment(store: Store, exp_id: str) -> Deleted:
    """Remove the experiment with all its keys, and its evidence files in the artifacts
    folder where this machine reaches them.

    Its record goes first, with its place in the experiments list, in one step: no
    reader finds it half deleted, and a worker's write for one of its runs (each
    checks the record in the same script) fails from then on. The keys are looked
    for only after that, so none a run in flight made meanwhile is left behind."""
    take_out = store.redis.register_script(scripts.TAKE_OUT)
    had_record, chords = take_out(
        keys=[store.keys.experiment(exp_id), store.keys.experiments()], args=[exp_id]
    )
    keys = experiment_keys(store, exp_id, chords)
    files = store.evidence.files(exp_id)
    removed, unreachable = 0, []
    for path in files:
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            continue
        except OSError:
            unreachable.append(path)
    for folder in {path.parent for path in files}:
        with contextlib.suppress(OSError):  # not empty, or not ours to remove
            folder.rmdir()
    for start in range(0, len(keys), DELETE_BATCH):
        store.redis.unlink(*keys[start : start + DELETE_BATCH])
    return Deleted(int(had_record) + len(keys), removed, unreachable)


def stored_bytes(store: Store) -> dict[str, int]:
    """Bytes each experiment takes in Redis: MEMORY USAGE of each of its ``exp:{id}*``
    keys (every element sampled), summed. One SCAN for all experiments."""
    by_experiment: dict[str, list[str]] = defaultdict(list)
    for key in store.redis.scan_iter(match=f"{store.keys.experiment('')}*", count=SCAN_COUNT):
        exp_id = store.keys.experiment_of(key)
        if exp_id:
            by_experiment[exp_id].append(key)
    sizes: dict[str, int] = {}
    for exp_id, keys in by_experiment.items():
        pipe = store.redis.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
        sizes[exp_id] = sum(size or 0 for size in pipe.execute())
    return sizes


def created_before(store: Store, cutoff: float) -> Iterator[str]:
    """Experiments created before `cutoff` (seconds since the epoch), oldest first."""
    yield from store.redis.zrangebyscore(store.keys.experiments(), "-inf", f"({cutoff}")
