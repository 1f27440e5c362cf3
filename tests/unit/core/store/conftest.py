"""The store's unit tests run against the session's real Redis (database 13 unless
EVALFLEET_TEST_REDIS_URL says otherwise), each test under a key prefix of its own,
whose keys it deletes when it ends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from core.store import Store
from tests.conftest import PREFIX


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    prefix = f"{PREFIX}unit-store-{uuid.uuid4().hex[:8]}:"
    store = Store.from_url(redis_url, prefix=prefix)
    yield store
    own = list(store.redis.scan_iter(match=f"{prefix}*", count=1000))
    if own:
        store.redis.delete(*own)
