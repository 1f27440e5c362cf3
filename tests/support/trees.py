"""A tree an agent could make in a second: folders nested past Python's recursion limit."""

from __future__ import annotations

import os
from pathlib import Path


def nest(top: Path, depth: int = 3000) -> None:
    """`depth` folders `d` each inside the last, under `top` (by descriptors: their
    paths pass PATH_MAX long before the bottom)."""
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
