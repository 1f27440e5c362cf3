"""`celery -A worker.app worker|flower`: the app on this machine's broker (worker.broker),
which refuses to start without one. Found once, as this module is imported, and
blanked at once from the process's arguments and environment (worker.broker): the
worker's agents, and anyone reading Flower's /proc, must not find the password."""

import sys

from worker.broker import NO_BROKER, worker_broker
from worker.celery_app import create_app

_broker = worker_broker()
if _broker is None:
    print(NO_BROKER, file=sys.stderr)
    raise SystemExit(2)
app = create_app(_broker)
