"""core.store.client: the text and binary clients of one Redis, and a full Redis's
refusal recognised however it comes."""

from __future__ import annotations

import redis

from core.store import Store
from core.store.client import refused_write


def test_the_text_client_decodes_and_the_binary_one_does_not(store: Store) -> None:
    key = store.keys.experiment("e")
    store.redis.hset(key, "blob", b"\x78\x9c\xff")
    assert store.binary.hget(key, "blob") == b"\x78\x9c\xff"
    store.redis.hset(key, "text", "é")
    assert store.redis.hget(key, "text") == "é"
    text_pool, binary_pool = store.redis.connection_pool, store.binary.connection_pool  # type: ignore[attr-defined]
    assert text_pool is not binary_pool
    assert text_pool.connection_kwargs["db"] == binary_pool.connection_kwargs["db"]


def test_a_full_redis_is_recognised_in_a_command_and_in_a_script() -> None:
    full = "OOM command not allowed when used memory > 'maxmemory'."
    assert refused_write(redis.OutOfMemoryError(full))
    assert refused_write(redis.ResponseError(f"Error running script: {full}"))
    assert not refused_write(redis.ResponseError("WRONGTYPE Operation against a key"))
    assert not refused_write(ValueError(full))
