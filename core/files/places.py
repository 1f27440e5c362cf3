"""Where a machine keeps evalfleet's working folders: the runs' folders
(EVALFLEET_WORKDIR, default $TMPDIR/evalfleet) and the experiments' files
(EVALFLEET_CACHE_DIR, default beside the work folder, named after it plus
`-files`, so the work folder keeps only run folders).

A worker works in them; a submit on the same machine leaves them out of the
matrix folder's bundle (core.files.bundle), where a work folder set inside the
project would otherwise ship the cached copies of earlier experiments, each
holding the one before.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def work_root() -> Path:
    return Path(os.environ.get("EVALFLEET_WORKDIR") or Path(tempfile.gettempdir()) / "evalfleet")


def cache_root() -> Path:
    configured = os.environ.get("EVALFLEET_CACHE_DIR")
    if configured:
        return Path(configured)
    root = work_root()
    return root.with_name(f"{root.name}-files")
