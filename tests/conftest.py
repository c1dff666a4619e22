"""Test isolation: nothing may be written outside temp dirs.

Keras, Ray, OpenVINO, ONNX Runtime, matplotlib, Hypothesis and the Hugging Face stack
like to write under ~ (or the working folder), and TensorFlow's autograph and our own
workers' compile caches under the system temp dir; HOME, TMPDIR and the cache
locations point into a session temp dir, and workers inherit the same environment.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("home")
    os.environ["HOME"] = str(home)
    scratch = home / "tmp"
    scratch.mkdir()
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)  # gettempdir() has read TMPDIR already
    os.environ["XDG_CACHE_HOME"] = str(home / ".cache")
    os.environ["BAKEOFF_CACHE_DIR"] = str(home / "bakeoff-cache")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(home / "inductor")
    os.environ["KERAS_HOME"] = str(home / ".keras")
    os.environ["MPLCONFIGDIR"] = str(home / "matplotlib")  # its font cache (the report's charts)
    # schemathesis' Hypothesis keeps a cache of constants in ./.hypothesis otherwise
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home / "hypothesis")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "bakeoff.db"
