"""scheduler.warm's own copies of names it must not import to know (the console script
runs it before anything else is imported)."""

from __future__ import annotations

from core.broker_url import ENV_BROKER, ENV_PASSWORD
from fleet.broker import CELERY_BROKER
from scheduler import warm


def test_the_broker_variables_it_looks_for_passwords_in_are_the_brokers() -> None:
    assert set(warm._BROKER_URLS) == {ENV_BROKER, CELERY_BROKER}
    assert warm._BROKER_PASSWORD == ENV_PASSWORD
    # A password in a variable of its own: any value holds one.
    assert warm._holds_a_password([], {ENV_PASSWORD: "x"})
    assert warm._holds_a_password([], {ENV_BROKER: "redis://:pw@host:6379/0"})
    assert not warm._holds_a_password(["--broker", "redis://host:6379/0"], {})
