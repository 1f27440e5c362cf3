"""Sending an experiment to Celery: one flat chord, runs in the header, aggregate as body.

The chord is wired the way Celery's own `chord(header)(body)` wires it on the
Redis result backend, without the per-task costs that make that call take
~2 ms a run (20 s for a 10,000-run experiment):

- the chord size goes to the backend first (`set_chord_size`), then every
  header message carries the group id, its index and the frozen body; a
  worker finishing a header task counts it (`on_chord_part_return`, which
  Celery runs whether or not the task's result is stored) and the last one
  sends the body;
- the messages go out in Redis pipelines, one LPUSH per queue, instead of one
  round trip each; a broker near its limit (maxmemory, noeviction) that refuses
  a batch is sent it in halves, down to one run, before the submit stops;
- run tasks ignore their Celery result: their RunResult lives in our own keys
  (core.store.keys), so the scheduler neither subscribes to a result channel per
  run nor leaves a result key per run in Redis;
- Celery and kombu build one message per tier x scenario (`Template`), into
  kombu's in-memory transport; every run's message is that one with its own
  ids, index and arguments, pushed in pipelines of LPUSHes as kombu's Redis
  transport pushes it. Celery's and kombu's own path costs ~0.3 ms a message
  (6,000 runs/s); this one ~0.03 ms. tests.integration.test_dispatch holds the two
  messages equal, ids aside.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery, Signature
from celery.utils import uuid
from kombu import Connection
from kombu.utils import json

from core.errors import FleetError, PartlySent
from core.evaluation.rejudge import RejudgePlan
from core.files.bundle import Bundle
from core.matrix import Matrix
from core.results.run import RunSpec
from core.store import Store, keys
from core.store.retention import delete_experiment
from fleet.sending import (
    AGGREGATE_TASK,
    AGGREGATE_VERSION_TASK,
    REJUDGE_TASK,
    RUN_TASK,
    run_options,
    run_queues,
    task_options,
)
from scheduler.plan import experiment_info, plan

# Messages per Redis pipeline: large enough to amortize the round trip, small
# enough that workers start on the first runs while the rest are being sent.
BATCH_SIZE = 500


def start(app: Celery, store: Store, matrix: Matrix, experiment_id: str, bundle: Bundle) -> int:
    """Record a new experiment with its files and send its runs (an adaptive one's first
    wave): what `scheduler submit` does. Returns how many runs the experiment may have."""
    total = matrix.total_runs()
    try:
        # The files first: no worker sees the experiment before them.
        store.bundles.save(experiment_id, bundle)
        info = experiment_info(matrix, experiment_id, total)
        store.experiments.create(info, matrix, manifest=bundle.manifest)
    except redis.RedisError as exc:  # a full broker: nothing of it may stay behind
        with contextlib.suppress(redis.RedisError):
            delete_experiment(store, experiment_id)
        raise FleetError(
            f"the broker refused a write before any run was sent ({exc}); nothing of "
            f"experiment {experiment_id} was kept: submit again once it takes writes"
        ) from exc
    first = matrix.first_wave_runs()
    send(app, store, matrix, experiment_id, plan(matrix, experiment_id), first, record=True)
    return total


# wide: the broker's two clients (Celery app, store) and the experiment's parts, which its
# two callers hold apart
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
        store.experiments.mark_sent(experiment_id, app.conf.task_default_queue)
        return
    group_id = uuid()
    store.experiments.note_chord(experiment_id, group_id)
    body.freeze(group_id=group_id)
    app.backend.set_chord_size(group_id, count)
    # Messages are the same for every run of a tier x scenario but for the run's own.
    templates: dict[tuple[str, str], Template] = {}
    with app.producer_or_acquire() as producer:
        for queue in run_queues(matrix, app.conf.task_default_queue):
            producer.maybe_declare(app.amqp.queues[queue])
    runs = iter(specs)
    index = sent = 0
    fits = BATCH_SIZE  # the most runs the broker took in one go
    while batch := list(itertools.islice(runs, BATCH_SIZE)):
        parcels = []
        for offset, spec in enumerate(batch):
            cell = (spec.tier, spec.scenario)
            if cell not in templates:
                templates[cell] = Template(app, run_options(matrix, spec), group_id, body)
            template = templates[cell]
            parcels.append(Parcel(spec, template.queue, template.message(spec, index + offset)))
        index += len(batch)
        while parcels:
            part = parcels[:fits]
            try:
                refused, why = _push(store, experiment_id, part, record)
            except redis.RedisError as exc:
                # The runs not sent are the resume's: their plan is the matrix's (complete_plan).
                raise PartlySent(experiment_id, sent, count, exc) from exc
            sent += len(part) - len(refused)
            if refused and len(part) == 1:  # not even one run fits
                raise PartlySent(experiment_id, sent, count, why)
            if refused:
                # A broker near its limit holds a whole command while it parses it:
                # fewer runs at once may fit where a batch does not.
                fits = len(part) // 2
            parcels[: len(part)] = refused
    store.experiments.mark_sent(experiment_id, app.conf.task_default_queue)


@dataclass(frozen=True)
class Parcel:
    """A run's message, ready to be pushed to its queue."""

    spec: RunSpec
    queue: str
    message: str


def _push(
    store: Store, experiment_id: str, parcels: list[Parcel], record: bool
) -> tuple[list[Parcel], redis.OutOfMemoryError | None]:
    """Push the parcels, one LPUSH per queue in one round trip; with `record`, their specs
    are stored first. Returns those a full broker refused, and its refusal: all of them
    if it refused their specs, else those of the queues whose LPUSH it refused (an LPUSH
    is refused whole or taken whole, so none is sent twice when they are pushed again)."""
    if record:
        try:
            store.specs.add(experiment_id, [p.spec for p in parcels])
        except redis.OutOfMemoryError as exc:
            return parcels, exc
    by_queue: dict[str, list[Parcel]] = {}
    for parcel in parcels:
        by_queue.setdefault(parcel.queue, []).append(parcel)
    pipe = store.redis.pipeline(transaction=False)
    for queue, group in by_queue.items():
        pipe.lpush(keys.queue_key(queue), *(p.message for p in group))
    refused: list[Parcel] = []
    why = None
    for group, reply in zip(by_queue.values(), pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.OutOfMemoryError):
            refused, why = refused + group, reply
        elif isinstance(reply, Exception):
            raise reply
    return refused, why


class Template:
    """The run-task message of one tier x scenario, as Celery and kombu build it, to be
    filled in per run: task id, group index, arguments (the spec) and delivery tag.

    The message is JSON'd once, with a marker in each per-run place; a run's
    message is the pieces between the markers joined with its own values."""

    def __init__(self, app: Celery, options: dict[str, Any], group_id: str, chord: Signature):
        # kombu's in-memory transport keeps the message exactly as its Redis
        # transport would push it (both are kombu's virtual transport).
        with Connection("memory://") as memory, memory.Producer() as producer:
            task_id = uuid()
            # By name: the scheduler's app has no tasks (fleet.app).
            app.send_task(
                RUN_TASK,
                ([],),  # the spec goes in per run
                producer=producer,
                task_id=task_id,
                group_id=group_id,
                group_index=0,
                chord=chord,
                declare=[],
                retry=False,
                **options,
            )
            self.queue = options.get("queue") or app.conf.task_default_queue
            raw = memory.default_channel._get(self.queue)
        if (raw["headers"]["id"], raw["properties"]["body_encoding"]) != (task_id, "base64"):
            raise RuntimeError(f"unexpected message layout from kombu: {raw!r}")
        _, kwargs, embed = json.loads(base64.b64decode(raw["body"]))
        # The body, [args, kwargs, embed]: args per run, the rest (the chord) as it is.
        self.body_tail = f", {json.dumps(kwargs)}, {json.dumps(embed)}]".encode()
        raw["body"] = _slot("body")
        raw["headers"].update(
            id=_slot("id"), root_id=_slot("id"), group_index=_slot("index"),
            argsrepr=_slot("argsrepr"),
        )  # fmt: skip
        raw["properties"].update(
            correlation_id=_slot("id"), argsrepr=_slot("argsrepr"), delivery_tag=_slot("tag")
        )
        pieces = _SLOT.split(json.dumps(raw))
        self.text, self.slots = pieces[0::2], pieces[1::2]

    def message(self, spec: RunSpec, index: int) -> str:
        """The JSON kombu's Redis transport would push for this run."""
        body = base64.b64encode(b"[[" + spec.model_dump_json().encode() + b"]" + self.body_tail)
        values = {
            "body": f'"{body.decode()}"',
            "id": f'"{uuid()}"',  # the one task id, in every place that names it
            "index": str(index),
            "argsrepr": json.dumps(spec.run_id),
            "tag": f'"{uuid()}"',
        }
        out = [self.text[0]]
        for slot, text in zip(self.slots, self.text[1:], strict=True):
            out += (values[slot], text)
        return "".join(out)


_SLOT = re.compile(r'"@evalfleet-slot-(\w+)@"')


def _slot(name: str) -> str:
    return f"@evalfleet-slot-{name}@"


# What a rejudge task may take beyond its judgments' deadlines: loading and storing.
_REJUDGE_MARGIN_S = 60.0


def send_rejudge(app: Celery, store: Store, matrix: Matrix, exp_id: str, plan: RejudgePlan) -> int:
    """Send a rejudge of every run of the experiment; returns how many were sent."""
    runs = sorted(store.results.all(exp_id), key=lambda r: r.run_id)
    budget = task_budget_s(matrix, plan)
    payload = plan.model_dump(mode="json")
    body = app.signature(
        AGGREGATE_VERSION_TASK,
        kwargs={"experiment_id": exp_id, "plan": payload},
        options={"ignore_result": True},
    )
    # Wired as scheduler.dispatch wires a submit's chord, not with chord(header)(body):
    # that call subscribes this process to every header task's result channel, and
    # unsubscribing at exit, once the embedded Redis is gone, printed a traceback.
    group_id = uuid()
    body.freeze(group_id=group_id)
    app.backend.set_chord_size(group_id, len(runs))
    for index, run in enumerate(runs):
        tier, scenario = matrix.tier(run.tier), matrix.scenario(run.scenario)
        app.send_task(
            REJUDGE_TASK,
            (exp_id, run.run_id, payload),
            group_id=group_id,
            group_index=index,
            chord=body,
            # The run's own queue: a fleet of per-tier queues has no one on the default
            # queue, and a rescore's gates need the tier's tools. The result is the
            # run's entry in the version, in our keys: none in Celery's.
            **task_options(budget, run.run_id, matrix.queue_for(tier, scenario)),
        )
    return len(runs)


def task_budget_s(matrix: Matrix, plan: RejudgePlan) -> float:
    """The longest one run's task may take: its judgments' deadlines, and for a rescore
    the gates' timeouts of the longest scenario."""
    judge = plan.judge or matrix.judge
    budget = _REJUDGE_MARGIN_S + (judge.deadline * judge.repeats if judge is not None else 0.0)
    if plan.rescore:
        budget += max(
            sum(g.timeout_s for g in plan.gates.get(s.id, s.evaluation.gates))
            for s in matrix.scenarios
        )
    return budget
