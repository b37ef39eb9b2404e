"""The cyclic collector is off while a file is processed and while the phases are derived, and as
it was afterwards, whatever happens inside."""

from __future__ import annotations

import gc

import pytest

from tracemerge.core.gc_pause import no_cyclic_gc
from tracemerge.phases import derivation
from tracemerge.run import filework


def test_off_inside_then_as_it_was() -> None:
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), no_cyclic_gc():
        raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def test_a_file_is_read_and_the_phases_derived_with_the_collector_off(monkeypatch) -> None:
    seen = []

    def note(*_args, **_kwargs):
        seen.append(gc.isenabled())
        raise RuntimeError("stop")

    monkeypatch.setattr(filework, "_process_file", note)
    monkeypatch.setattr(derivation, "_gather", note)
    with pytest.raises(RuntimeError):
        filework.process_file(None)
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        derivation.derive([], {}, ())
    assert seen == [False, False] and gc.isenabled()
