"""Sending an experiment to Celery: one flat chord, runs in the header, aggregate as body.

The chord is wired the way Celery's own `chord(header)(body)` wires it on the
Redis result backend, without the per-task costs that make that call take
~2 ms a run (20 s for a 10,000-run experiment):

- the chord size goes to the backend first (`set_chord_size`), then every
  header message carries the group id, its index and the frozen body; a
  worker finishing a header task counts it (`on_chord_part_return`, which
  Celery runs whether or not the task's result is stored) and the last one
  sends the body;
- the messages go out in Redis pipelines (kombu's `Producer.batch`) instead
  of one round trip each;
- run tasks ignore their Celery result: their RunResult lives in our own keys
  (DESIGN.md), so the scheduler neither subscribes to a result channel per
  run nor leaves a result key per run in Redis.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from celery import Celery
from celery.utils import uuid

from core.bundle import Bundle
from core.config import Matrix
from core.results import RunSpec
from core.store import Store
from scheduler.plan import experiment_info, plan
from worker.sending import AGGREGATE_TASK, RUN_TASK, run_options, run_queues

# Messages per Redis pipeline: large enough to amortize the round trip, small
# enough that workers start on the first runs while the rest are being sent.
BATCH_SIZE = 500


def start(app: Celery, store: Store, matrix: Matrix, experiment_id: str, bundle: Bundle) -> int:
    """Record a new experiment with its files and send its runs (an adaptive one's first
    wave): what `scheduler submit` does. Returns how many runs the experiment may have."""
    total = matrix.total_runs()
    # The files first: no worker sees the experiment before them.
    store.save_bundle(experiment_id, bundle)
    info = experiment_info(matrix, experiment_id, total)
    store.create_experiment(info, matrix, manifest=bundle.manifest)
    first = matrix.first_wave_runs()
    send(app, store, matrix, experiment_id, plan(matrix, experiment_id), first, record=True)
    return total


def send(
    app: Celery,
    store: Store,
    matrix: Matrix,
    experiment_id: str,
    specs: Iterable[RunSpec],
    count: int,
    *,
    record: bool = False,
) -> None:
    """Send the `count` runs of `specs` as one chord whose body aggregates the
    experiment; with `record`, each batch's specs are stored before it is sent.

    `specs` is consumed one batch at a time, so memory does not grow with the
    experiment."""
    body = app.signature(
        AGGREGATE_TASK,
        kwargs={"experiment_id": experiment_id},
        # Its real argument, every run's summary, is too long to show in Flower.
        options={"ignore_result": True, "argsrepr": f"(<{count} run summaries>,)"},
    )
    if not count:
        body.apply_async(args=(None,))
        store.mark_sent(experiment_id, app.conf.task_default_queue)
        return
    group_id = uuid()
    store.note_chord(experiment_id, group_id)
    body.freeze(group_id=group_id)
    app.backend.set_chord_size(group_id, count)
    # Options are the same for every run of a tier x scenario: built once per cell.
    cell_options: dict[tuple[str, str], dict[str, Any]] = {}
    run = app.tasks[RUN_TASK]
    runs = iter(specs)
    index = 0
    with app.producer_or_acquire() as producer, producer.batch(max_size=BATCH_SIZE):
        for queue in run_queues(matrix, app.conf.task_default_queue):
            producer.maybe_declare(app.amqp.queues[queue])
        while batch := list(itertools.islice(runs, BATCH_SIZE)):
            if record:
                store.add_specs(experiment_id, batch)
            for spec in batch:
                cell = (spec.tier, spec.scenario)
                if cell not in cell_options:
                    cell_options[cell] = run_options(matrix, spec)
                # run.apply_async rather than run_signature(...).apply_async: the same
                # message without building and cloning a signature per run.
                run.apply_async(
                    (spec.model_dump(mode="json"),),
                    producer=producer,
                    group_id=group_id,
                    group_index=index,
                    chord=body,
                    # Queues were declared above; a pipelined message is only sent
                    # at the flush, so retrying its buffering would retry nothing.
                    declare=[],
                    retry=False,
                    **{**cell_options[cell], "argsrepr": spec.run_id},
                )
                index += 1
    store.mark_sent(experiment_id, app.conf.task_default_queue)
