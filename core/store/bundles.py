"""The files shipped with an experiment: ``exp:{id}:files``, sha256 -> the file's
zlib-compressed bytes, and the manifest naming them by digest under ``files`` in
the experiment's record.

The files are saved before the record (Experiments.create), so a worker that
finds the manifest finds every file it names.
"""

from __future__ import annotations

import zlib

from core.files.bundle import Bundle, Manifest
from core.store.client import BinaryClient, TextClient
from core.store.keys import Keys

# Files written per round-trip: a bundle of many small files goes in a few.
BATCH = 100


class Bundles:
    def __init__(self, client: TextClient, binary: BinaryClient, keys: Keys):
        self.redis = client
        self.binary = binary
        self.keys = keys

    def save(self, exp_id: str, bundle: Bundle) -> None:
        """The files of a new experiment, compressed, by digest."""
        pipe = self.binary.pipeline(transaction=False)
        for digest, data in bundle.contents.items():
            pipe.hset(self.keys.files(exp_id), digest, zlib.compress(data, 6))
            if len(pipe) >= BATCH:
                pipe.execute()
        pipe.execute()

    def manifest(self, exp_id: str) -> Manifest | None:
        """The experiment's manifest; None for one submitted before files travelled."""
        raw = self.redis.hget(self.keys.experiment(exp_id), "files")
        return Manifest.model_validate_json(raw) if raw else None

    def files(self, exp_id: str, digests: list[str]) -> dict[str, bytes]:
        """The contents of the experiment's files with these digests (those stored)."""
        blobs = self.binary.hmget(self.keys.files(exp_id), digests) if digests else []
        return {d: zlib.decompress(b) for d, b in zip(digests, blobs, strict=True) if b}
