"""`celery -A worker.app worker|flower`: the app on this machine's broker (worker.broker),
which refuses to start without one."""

import sys

from worker.broker import NO_BROKER, worker_broker
from worker.celery_app import create_app

_broker = worker_broker()
if _broker is None:
    print(NO_BROKER, file=sys.stderr)
    raise SystemExit(2)
app = create_app(_broker)
