"""The fleet's protocol: what the scheduler and the workers both do to an experiment on
the broker, imported by both and owned by neither.

- fleet.app: the Celery app as both sides configure it (evalfleet's Celery
  decisions); a client sends tasks by name and imports no task.
- fleet.sending: task names, task options, time budgets and queues.
- fleet.broker: which broker, and its password kept out of every process's
  arguments and environment (fleet.procfs).
- fleet.finish: an experiment's, or a report version's, report once every run
  has its result.
- fleet.recovery: the sweep that sends lost runs again and finishes experiments;
  fleet.waves: an adaptive experiment's next wave.
- fleet.kombu_guard: kombu's Redis transport made to survive a Redis restart.

The worker (`worker`, what runs on a worker machine) and the scheduler (the CLI
and the Python API) import this package; it imports neither, and the scheduler
imports no worker module (import-linter's layers, pyproject.toml).
"""
