"""core.store.bundles: an experiment's files by digest, compressed, and its manifest."""

from __future__ import annotations

import hashlib
import zlib

from core.files.bundle import Bundle, Manifest
from core.store import Store
from core.store.bundles import BATCH


def test_files_come_back_by_digest_whatever_their_number(store: Store) -> None:
    contents = {hashlib.sha256(bytes([i])).hexdigest(): bytes([i]) * 100 for i in range(BATCH + 5)}
    store.bundles.save("e", Bundle(Manifest(), contents))
    wanted = [*list(contents)[-3:], "0" * 64]
    assert store.bundles.files("e", wanted) == {d: contents[d] for d in wanted[:3]}
    stored = store.binary.hget(store.keys.files("e"), wanted[0])
    assert stored is not None and zlib.decompress(stored) == contents[wanted[0]]
    assert store.bundles.files("e", []) == {}


def test_an_experiment_without_files_has_no_manifest(store: Store) -> None:
    assert store.bundles.manifest("e") is None
    store.redis.hset(store.keys.experiment("e"), "files", Manifest(root="/m").model_dump_json())
    assert store.bundles.manifest("e") == Manifest(root="/m")
