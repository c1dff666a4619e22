"""The worker's import clock: the import share of a cold start (rule 3)."""

from __future__ import annotations

import builtins
import importlib
import sys
import time
from pathlib import Path

import pytest

from bakeoff.measure.worker import ImportClock


def _slow_modules(tmp_path: Path, prefix: str) -> tuple[str, str]:
    """An outer module that sleeps 0.2 s and imports an inner one that sleeps 0.2 s."""
    outer, inner = f"{prefix}_outer", f"{prefix}_inner"
    (tmp_path / f"{inner}.py").write_text("import time\ntime.sleep(0.2)\n")
    (tmp_path / f"{outer}.py").write_text(f"import time\nimport {inner}\ntime.sleep(0.2)\n")
    return outer, inner


@pytest.mark.parametrize("how", ["statement", "import_module"])
def test_the_import_clock_counts_both_ways_of_importing_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    outer, inner = _slow_modules(tmp_path, f"bakeoff_clock_{how}")
    try:
        started = time.perf_counter()
        with ImportClock() as clock:
            if how == "statement":
                exec(f"import {outer}", {})
            else:
                importlib.import_module(outer)
        elapsed = time.perf_counter() - started
        assert outer in sys.modules and inner in sys.modules
        # Both sleeps are inside the clocked import...
        assert clock.seconds >= 0.4
        # ...and the nested import is not counted a second time on top.
        assert clock.seconds <= elapsed
    finally:
        sys.modules.pop(outer, None)
        sys.modules.pop(inner, None)


def test_the_import_clock_puts_the_import_functions_back() -> None:
    before = (builtins.__import__, importlib.import_module)
    with pytest.raises(RuntimeError), ImportClock():
        assert builtins.__import__ is not before[0]
        assert importlib.import_module is not before[1]
        raise RuntimeError("a load that fails")
    assert (builtins.__import__, importlib.import_module) == before
