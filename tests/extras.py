"""Optional parts that `make test` installs: a test that needs one skips where it is
missing, except under `CI=true`, where it fails. CI runs `make test`, which installs
every such part; a skip there would turn a broken install into a green run."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _missing(what: str, install: str) -> None:
    message = f"{what} is missing; install: {install}"
    if in_ci():
        pytest.fail(f"{message} (make test installs it; under CI=true this fails)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_module(module: str, install: str) -> None:
    """Skips (fails under CI=true) where `module` cannot be imported. Checked with
    find_spec: importing it here, before conftest points HOME into a temp dir, may
    write under the real ~ (MLflow's telemetry id)."""
    if importlib.util.find_spec(module) is None:
        _missing(f"the Python module {module!r}", install)


def require_program(path: Path, install: str) -> None:
    """Skips (fails under CI=true) where the program at `path` is not there."""
    if not path.exists():
        _missing(str(path), install)
