"""The experiment records in Redis, no TTL: one small class per structure or
concern, each named after what it keeps and reached from the Store facade
(`store.results.save(result)`, `store.experiments.info(exp_id)`); every key is
named in core.store.keys, every step that must be atomic is one Lua script in
core.store.scripts.
"""

from __future__ import annotations

from core.store.attempts import Attempts
from core.store.bundles import Bundles
from core.store.client import BinaryClient, TextClient, connect
from core.store.evidence import Evidence
from core.store.experiments import Experiments
from core.store.health import Health
from core.store.judgments import Judgments
from core.store.keys import Keys, key_prefix
from core.store.leases import Leases
from core.store.ledger import Ledger
from core.store.reports import Reports
from core.store.results import Results
from core.store.specs import Specs
from core.store.waves import Waves
from core.store.workspaces import Workspaces


class Store:
    """One Redis database's records under one key prefix. The classes share the
    facade's two clients (replies as str, and as bytes for compressed blobs), so
    a process holds one connection pool of each per broker."""

    def __init__(
        self,
        client: TextClient,
        binary: BinaryClient,
        prefix: str | None = None,
        url: str | None = None,
    ):
        self.url = url  # the broker's URL, password included: redacted from every result
        self.redis = client
        self.binary = binary
        self.keys = keys = Keys(prefix if prefix is not None else key_prefix())
        self.leases = Leases(client, keys)
        self.ledger = Ledger(client, keys)
        self.specs = Specs(client, keys)
        self.experiments = Experiments(client, keys, self.ledger, self.specs)
        self.results = Results(client, keys, self.specs, self.leases)
        self.attempts = Attempts(client, keys)
        self.health = Health(client, keys)
        self.waves = Waves(client, keys)
        self.evidence = Evidence(binary, keys)
        self.bundles = Bundles(client, binary, keys)
        self.workspaces = Workspaces(client, keys)
        self.judgments = Judgments(client, keys)
        self.reports = Reports(client, keys)

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None) -> Store:
        return cls(*connect(url), prefix, url)
