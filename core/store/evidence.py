"""The runs' evidence: ``exp:{id}:evidence``, run id -> the run's RunEvidence as
zlib-compressed JSON, or ``file:`` and the path of that blob in the experiment's
artifacts folder; the experiment's record counts the stored bytes under
``evidence_bytes``.

Evidence counts toward the experiment's cap as it is stored, in one step: with
the run's result (core.store.results, `finish`), or on its own (SAVE_EVIDENCE).
Once the whole of a run's evidence would pass the cap, its minimal evidence is
kept instead, so the cap holds however many workers store at once.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from core.errors import ExperimentNotFound
from core.evidence.models import RunEvidence
from core.store import scripts
from core.store.client import SCAN_COUNT, BinaryClient
from core.store.keys import Keys

# An evidence value that is not a blob but where the blob is: the experiment's
# artifacts folder (zlib data never starts so).
FILE_POINTER = b"file:"
NO_CAP = 1 << 62


@dataclass(frozen=True)
class EncodedEvidence:
    """A run's evidence as Redis keeps it: its JSON, zlib-compressed."""

    value: bytes
    size: int  # counted toward the experiment's cap

    @classmethod
    def of(cls, evidence: RunEvidence) -> EncodedEvidence:
        blob = zlib.compress(evidence.model_dump_json().encode(), 6)
        return cls(blob, len(blob))


@dataclass(frozen=True)
class SavedEvidence:
    kept: Literal["whole", "minimal"]
    bytes: int  # counted toward the experiment's cap
    path: Path | None = None  # the file, when the evidence went to the artifacts folder


class Evidence:
    def __init__(self, binary: BinaryClient, keys: Keys):
        self.binary = binary
        self.keys = keys
        self._save = binary.register_script(scripts.SAVE_EVIDENCE)

    def save(
        self,
        evidence: RunEvidence,
        *,
        encoded: EncodedEvidence | None = None,
        minimal: RunEvidence | None = None,
        cap_bytes: int | None = None,
        folder: Path | None = None,
    ) -> SavedEvidence:
        """Store a run's evidence (already bounded and redacted), compressed: in Redis,
        or with `folder` as a file there (Redis keeps its path). With `cap_bytes`, the
        experiment's cap: once its stored evidence would pass it, `minimal` (always in
        Redis) is stored instead. `encoded`: `evidence` encoded already."""
        blob = (encoded or EncodedEvidence.of(evidence)).value
        value, path = blob, None
        if folder is not None:
            path = evidence_file(folder, evidence.experiment_id, evidence.run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
            value = FILE_POINTER + str(path).encode()
        if self._store(evidence, value, len(blob), cap_bytes or NO_CAP) == b"whole":
            return SavedEvidence("whole", len(blob), path)
        if path is not None:
            path.unlink(missing_ok=True)
        small = blob if minimal is None else EncodedEvidence.of(minimal).value
        self._store(evidence, small, len(small), NO_CAP)
        return SavedEvidence("minimal", len(small))

    def _store(self, evidence: RunEvidence, value: bytes, size: int, cap_bytes: int) -> bytes:
        """'whole' or 'over' (SAVE_EVIDENCE); ExperimentNotFound once it has no record."""
        exp_id = evidence.experiment_id
        kept: bytes = self._save(
            keys=[self.keys.evidence(exp_id), self.keys.experiment(exp_id)],
            args=[evidence.run_id, value, size, cap_bytes],
        )
        if kept == b"gone":
            raise ExperimentNotFound(exp_id)
        return kept

    def count(self, exp_id: str) -> int:
        """How many runs have their evidence stored."""
        return int(self.binary.hlen(self.keys.evidence(exp_id)))

    def get(self, exp_id: str, run_id: str) -> RunEvidence | None:
        """Raises OSError when the evidence is a file this machine cannot read."""
        blob = self.binary.hget(self.keys.evidence(exp_id), run_id)
        return _evidence(blob) if blob else None

    def blob(self, exp_id: str, run_id: str) -> bytes | None:
        """A run's evidence as stored: its JSON, zlib-compressed (OSError as `get`)."""
        blob = self.binary.hget(self.keys.evidence(exp_id), run_id)
        return _evidence_blob(blob) if blob else None

    def blobs(self, exp_id: str) -> dict[str, bytes]:
        """Every stored run's evidence by run id, as stored (zlib-compressed JSON): a
        page passes it through to the browser, which inflates it (streamed: hscan)."""
        return {
            run_id.decode(): _evidence_blob(blob)
            for run_id, blob in self.binary.hscan_iter(self.keys.evidence(exp_id))
        }

    def files(self, exp_id: str) -> list[Path]:
        """The files of the experiment's evidence kept in an artifacts folder."""
        return [
            Path(value[len(FILE_POINTER) :].decode())
            for _, value in self.binary.hscan_iter(self.keys.evidence(exp_id), count=SCAN_COUNT)
            if value.startswith(FILE_POINTER)
        ]


def evidence_file(folder: Path, exp_id: str, run_id: str) -> Path:
    """Where a run's evidence goes in an artifacts folder: one folder per experiment
    (what deleting the experiment removes), one file per run."""
    return folder / exp_id / f"{quote(run_id, safe='')}.json.z"


def _evidence(blob: bytes) -> RunEvidence:
    return RunEvidence.model_validate_json(zlib.decompress(_evidence_blob(blob)))


def _evidence_blob(blob: bytes) -> bytes:
    if blob.startswith(FILE_POINTER):
        return Path(blob[len(FILE_POINTER) :].decode()).read_bytes()
    return blob
