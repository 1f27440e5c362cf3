"""Bytecode written once, by the test session's controller, before any worker starts.

Python writes no bytecode cache where PYTHONDONTWRITEBYTECODE is set (as on CI
machines that keep their images clean). Then each `scheduler` command and worker
the tests start compiled some 150 modules from source (a third of a cold
command's start-up, repeated hundreds of times), and each pytest-xdist worker
rewrote the asserts of all ~200 test modules (6 of the 9.5 s of CPU its
collection took, on every run). A user's installation caches both.
"""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest

PACKAGES = ("core", "scheduler", "worker", "evalfleet", "tests", "examples")


def compile_project(root: Path) -> None:
    for package in PACKAGES:
        compileall.compile_dir(root / package, quiet=1)


def rewrite_test_modules(config: pytest.Config, tests: Path) -> None:
    """Each test module's assert-rewritten code, cached where pytest looks for it (and
    would have written it, bytecode allowed). With another pytest, whose internals
    differ, nothing is cached: each worker rewrites, as before."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return
    if assertstate_key not in config.stash:  # --assert=plain: nothing is rewritten
        return
    state = config.stash[assertstate_key]
    for source in sorted(tests.rglob("test_*.py")):
        pyc = get_cache_dir(source) / (source.name[: -len(".py")] + PYC_TAIL)
        if _read_pyc(source, pyc, state.trace) is None:
            source_hash, code = _rewrite_test(source, config)
            pyc.parent.mkdir(exist_ok=True)
            _write_pyc(state, code, source_hash, pyc)
