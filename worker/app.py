"""`celery -A worker.app worker|flower`: the app on this machine's broker (worker.broker)."""

from worker.broker import worker_broker
from worker.celery_app import create_app

app = create_app(worker_broker())
