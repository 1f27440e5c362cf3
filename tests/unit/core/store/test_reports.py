"""core.store.reports: version 1 may be written again, a later version and its runs
once each; version numbers are taken atomically."""

from __future__ import annotations

from core.results.report import CrossTierResult, ExperimentReport
from core.store import Store
from tests.support.records import record_experiment, result_of


def _report(info_id: str, store: Store, version: int, note: str) -> ExperimentReport:
    info = store.experiments.info(info_id)
    return ExperimentReport(
        experiment=info,
        version=version,
        version_note=note,
        cross_tier=CrossTierResult(baseline="T0"),
    )


def test_versions_are_numbered_once_and_a_later_one_never_rewritten(store: Store) -> None:
    info, _ = record_experiment(store)
    assert store.reports.versions(info.id) == []
    store.reports.save(_report(info.id, store, 1, "first"))
    store.reports.save(_report(info.id, store, 1, "resumed"))
    assert [store.reports.new_version(info.id) for _ in range(2)] == [2, 3]
    store.reports.save(_report(info.id, store, 3, "rejudged"))
    store.reports.save(_report(info.id, store, 3, "again"))
    assert store.reports.versions(info.id) == [1, 3]
    assert [store.reports.get(info.id, v).version_note for v in (1, 3)] == [  # type: ignore[union-attr]
        "resumed",
        "rejudged",
    ]
    assert store.reports.get(info.id, 2) is None


def test_a_versions_runs_are_kept_apart_from_the_first(store: Store) -> None:
    info, specs = record_experiment(store)
    store.results.save(result_of(specs[0], passed=False))
    assert store.reports.save_run(2, result_of(specs[0], passed=True))
    assert not store.reports.save_run(2, result_of(specs[0], passed=False))
    assert store.reports.run(info.id, 2, specs[0].run_id) == result_of(specs[0], passed=True)
    assert store.reports.run_count(info.id, 2) == 1
    assert [r.passed for r in store.reports.runs(info.id, 2)] == [True]
    assert [r.passed for r in store.results.all(info.id)] == [False]
