"""Everything evalfleet keeps in Redis (I/O): one module names every key, and small
classes read and write each structure behind the Store facade.
"""

from core.store.store import Store

__all__ = ["Store"]
