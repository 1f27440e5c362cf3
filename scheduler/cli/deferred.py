"""A module of a library executed at its first use rather than when its package is
imported.

redis-py's package imports its asyncio client as it starts (`from redis import
asyncio` in redis/__init__.py), about a third of `import redis`, and nothing the
CLI does uses it. `defer("redis.asyncio")`, before redis is first imported, puts in
its place a module object whose code runs the first time one of its attributes is
read: `import redis.asyncio` and `from redis import asyncio` still succeed, and
`redis.asyncio.Redis` works as it always did, only later.

importlib.util.LazyLoader would not do: the import system itself reads the module's
`__spec__` while redis/__init__.py imports it, and that read would run it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.RLock()


class _Deferred(types.ModuleType):
    """Its module's code runs at the first read of an attribute it has not set (its
    spec, path and name are set from the start)."""

    def __getattr__(self, name: str) -> Any:
        with _lock:
            if self.__dict__.get("_deferred_running"):  # read by its own code, meanwhile
                raise AttributeError(name)
            if type(self) is _Deferred:  # not run by another thread meanwhile
                spec = self.__spec__
                assert spec is not None and spec.loader is not None
                self.__dict__["_deferred_running"] = True
                try:
                    spec.loader.exec_module(self)
                finally:
                    del self.__dict__["_deferred_running"]
                self.__class__ = types.ModuleType  # type: ignore[assignment]
        return getattr(self, name)


def defer(name: str) -> None:
    """Defer the submodule `name` (a.b) unless its package is imported already, when
    it is too late, or it is not installed."""
    package, _, _ = name.rpartition(".")
    if package in sys.modules or name in sys.modules:
        return
    # Found without importing the package, which would import the module.
    package_spec = importlib.util.find_spec(package)
    if package_spec is None or package_spec.submodule_search_locations is None:
        return
    spec = importlib.machinery.PathFinder.find_spec(name, package_spec.submodule_search_locations)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    sys.modules[name] = module
