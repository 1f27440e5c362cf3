"""The completeness test of the extension points (docs/EXTENDING.md): a registered gate
type or transcript format that lacks a piece fails here, named, with where it goes."""

from __future__ import annotations

from typing import get_args

from core.evaluation.gates import EVALUATORS
from core.matrix import GATES, PRESETS, TRANSCRIPT_FORMATS, Gate, GateModel, gate_tag
from core.transcripts import FORMATS


def _all_subclasses(cls: type[GateModel]) -> set[type[GateModel]]:
    found = set(cls.__subclasses__())
    return found.union(*(_all_subclasses(sub) for sub in found))


def test_every_gate_model_has_an_evaluator_and_every_evaluator_a_model() -> None:
    no_evaluator = sorted(set(GATES) - set(EVALUATORS))
    no_model = sorted(set(EVALUATORS) - set(GATES))
    assert not no_evaluator, (
        f"gate types without an evaluator in core.evaluation.gates: {no_evaluator}"
    )
    assert not no_model, f"evaluators of no gate model in core.matrix.gates: {no_model}"


def test_every_gate_model_is_registered_and_read_as_one_of_the_gates() -> None:
    concrete = {cls for cls in _all_subclasses(GateModel) if "type" in cls.model_fields}
    unregistered = sorted(cls.__name__ for cls in concrete if GATES.get(gate_tag(cls)) is not cls)
    assert not unregistered, f"gate models without @gate (core.matrix.gates): {unregistered}"
    # A gate registered after the union was built would be refused as an unknown type.
    (union, _discriminator) = get_args(Gate)
    assert get_args(union) == tuple(GATES.values())


def test_the_matrix_accepts_exactly_the_formats_core_transcripts_reads() -> None:
    unread = sorted(set(TRANSCRIPT_FORMATS) - set(FORMATS))
    unlisted = sorted(set(FORMATS) - set(TRANSCRIPT_FORMATS))
    assert not unread, (
        f"formats matrix.yaml accepts that no core.transcripts module reads: {unread}"
    )
    assert not unlisted, f"formats read but not in core.matrix's TRANSCRIPT_FORMATS: {unlisted}"


def test_every_preset_names_a_format_and_its_session_files_have_a_reader() -> None:
    for name, preset in PRESETS.items():
        assert preset.transcript in FORMATS, f"preset {name}: unknown format {preset.transcript}"
        reads_session = FORMATS[preset.transcript].session_calls is not None
        # Files the worker copies out that nothing reads, or a reader never given any.
        assert (preset.session_files is not None) == reads_session, name
