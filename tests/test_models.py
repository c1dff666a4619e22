"""Torch weights in a training checkpoint (`[model] weights_key`): the state_dict a
checkpoint dict holds is read with torch.load(weights_only=True), found by its key
path, and loaded as a plain state_dict would be. Tiny real models, all in tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.cache import model_hash
from bakeoff.errors import UserError
from bakeoff.loader import load_workload
from bakeoff.models import build_torch_model, read_state_dict
from bakeoff.source import ModelSource
from bakeoff.trials.fields_json import decode, encode
from bakeoff.workload import parse_spec
from torch_weights import NotATensor, RunsCode, reference_model, torch_workload


def _optimizer_state(tmp_path: Path) -> dict[str, Any]:
    """A real Adam state_dict after one step (tensors, ints and a param_groups list)."""
    import torch

    other = reference_model(tmp_path, seed=7)
    opt = torch.optim.Adam(other.parameters(), lr=1e-3)
    other(torch.ones(2, 8)).sum().backward()
    opt.step()
    return opt.state_dict()


def _checkpoint_workload(
    tmp_path: Path, checkpoint: dict[str, Any], weights_key: str | None
) -> Path:
    import torch

    torch.save(checkpoint, tmp_path / "ckpt.pt")
    extra = f'weights_key = "{weights_key}"\n' if weights_key is not None else ""
    return torch_workload(tmp_path, "ckpt.pt", model_extra=extra)


def _refusal(tmp_path: Path, checkpoint: dict[str, Any], weights_key: str | None) -> str:
    with pytest.raises(UserError) as info:
        load_workload(str(_checkpoint_workload(tmp_path, checkpoint, weights_key)))
    msg = str(info.value)
    assert "\n" not in msg  # one line, as every UserError
    return msg


@pytest.mark.parametrize(
    ("layout", "weights_key"),
    [("flat", "model_state"), ("nested", "ckpt.model"), ("dotted", "ema.v2")],
)
def test_weights_key_loads_the_state_dict_a_checkpoint_holds(
    tmp_path: Path, layout: str, weights_key: str
) -> None:
    import torch

    ref = reference_model(tmp_path)
    state = ref.state_dict()
    torch.save(state, tmp_path / "plain.pt")
    optimizer_state = _optimizer_state(tmp_path)
    checkpoint: dict[str, Any] = {
        "flat": {"model_state": state, "optimizer_state": optimizer_state, "step": 3},
        "nested": {"ckpt": {"model": state, "epoch": 1}, "optimizer_state": optimizer_state},
        # a key with dots of its own is found whole, not split
        "dotted": {"ema.v2": state, "ema": {"v1": {"bias": torch.zeros(1)}}, "step": 3},
    }[layout]
    wl = load_workload(str(_checkpoint_workload(tmp_path, checkpoint, weights_key)))
    assert wl.source.weights_key == weights_key
    plain = load_workload(str(torch_workload(tmp_path, "plain.pt")))
    # The worker's path: the source crosses as JSON, then the model is built from it.
    source = decode(ModelSource, encode(wl.source), "source")
    assert source == wl.source
    x = torch.from_numpy(wl.inputs["input"])
    with torch.no_grad():
        expected = ref(x)
        assert torch.equal(build_torch_model(source)(x), expected)
        assert torch.equal(build_torch_model(plain.source)(x), expected)


def test_a_checkpoint_without_weights_key_is_refused_with_the_key_to_set(
    tmp_path: Path,
) -> None:
    state = reference_model(tmp_path).state_dict()
    optimizer_state = _optimizer_state(tmp_path)
    msg = _refusal(
        tmp_path, {"model_state": state, "optimizer_state": optimizer_state, "step": 3}, None
    )
    assert "model.weights = 'ckpt.pt'" in msg and "not a plain state_dict" in msg
    assert "'model_state', 'optimizer_state', 'step' are not tensors" in msg
    assert 'set weights_key = "model_state" to read the state_dict inside it' in msg
    # one level deeper, and two candidates: both named
    msg = _refusal(tmp_path, {"checkpoint": {"model": state, "ema": state}, "step": 3}, None)
    assert 'set weights_key = "checkpoint.model" or "checkpoint.ema"' in msg
    # a weights_key that reaches a checkpoint again: the fix names the full path
    msg = _refusal(tmp_path, {"checkpoint": {"model": state, "step": 3}}, "checkpoint")
    assert "ckpt.pt['checkpoint'] is not a plain state_dict" in msg
    assert 'set weights_key = "checkpoint.model"' in msg


def test_a_weights_key_that_is_not_there_names_the_keys_that_are(tmp_path: Path) -> None:
    state = reference_model(tmp_path).state_dict()
    checkpoint = {"model_state": state, "optimizer_state": _optimizer_state(tmp_path), "step": 3}
    msg = _refusal(tmp_path, checkpoint, "model_stat")
    assert "model.weights = 'ckpt.pt', weights_key = 'model_stat'" in msg
    assert "has no key 'model_stat' (did you mean 'model_state'?)" in msg
    assert "its keys: 'model_state', 'optimizer_state', 'step'" in msg
    msg = _refusal(tmp_path, {"ckpt": {"model": state}}, "ckpt.weights")
    assert "ckpt.pt['ckpt'] has no key 'weights'; its keys: 'model'" in msg
    msg = _refusal(tmp_path, checkpoint, "step.model")
    assert "ckpt.pt['step'] is not a dict (an int): it has no key 'model'" in msg
    # what the key reaches is checked as a whole file is: an optimizer's state is no model's
    msg = _refusal(tmp_path, checkpoint, "optimizer_state")
    assert "ckpt.pt['optimizer_state'] is not a plain state_dict" in msg
    assert "save model.state_dict() alone" in msg


def test_a_checkpoint_that_would_run_code_is_refused_as_before(tmp_path: Path) -> None:
    import torch

    marker = tmp_path / "MARKER"
    inner = {"net.0.weight": torch.zeros(16, 8), "net.0.bias": RunsCode(marker)}
    for checkpoint in ({"model_state": inner, "step": 3}, {"model_state": NotATensor()}):
        msg = _refusal(tmp_path, checkpoint, "model_state")
        assert "would run code when unpickled" in msg
        assert "bakeoff only loads plain tensors and will not unpickle it" in msg
    assert not marker.exists()
    # The worker's path refuses it too, whatever the orchestrator checked.
    source = ModelSource(
        "torch",
        "tiny_arch:build",
        None,
        str(tmp_path),
        weights=str(tmp_path / "ckpt.pt"),
        weights_key="model_state",
    )
    with pytest.raises(UserError, match="would run code when unpickled"):
        build_torch_model(source)


def _spec(model_lines: str) -> str:
    return f'name = "w"\n[model]\n{model_lines}[data]\npath = "d.npz"\n'


@pytest.mark.parametrize(
    ("model_lines", "expected"),
    [
        (
            'kind = "torch"\nfactory = "m:b"\nweights_key = "model_state"\n',
            "model: weights_key = 'model_state' needs weights = \"checkpoint.pt\"",
        ),
        (
            'kind = "torch"\nfactory = "m:b"\nweights = "m.safetensors"\nweights_key = "m"\n',
            "model: weights_key is for a checkpoint dict (.pt, .pth, .bin); "
            "weights = 'm.safetensors' is a safetensors file",
        ),
        (
            'kind = "onnx"\npath = "m.onnx"\nweights_key = "model_state"\n',
            'model: weights_key is for kind = "torch" only, not kind = "onnx"',
        ),
        ('kind = "torch"\nfactory = "m:b"\nweights = "c.pt"\nweights_key = ""\n', "weights_key"),
    ],
)
def test_weights_key_spec_errors(model_lines: str, expected: str) -> None:
    with pytest.raises(UserError) as info:
        parse_spec(_spec(model_lines), "w.toml")
    assert expected in str(info.value)


def test_safetensors_with_a_weights_key_is_refused_in_the_worker_too(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file(reference_model(tmp_path).state_dict(), str(tmp_path / "m.safetensors"))
    with pytest.raises(UserError, match="leave weights_key out"):
        read_state_dict(str(tmp_path / "m.safetensors"), "model.weights", "model_state")


def test_weights_key_is_part_of_the_models_cache_key(tmp_path: Path) -> None:
    import torch

    state = reference_model(tmp_path).state_dict()
    torch.save({"model": state, "ema": state}, tmp_path / "ckpt.pt")

    def source(weights_key: str) -> ModelSource:
        return ModelSource(
            "torch",
            "tiny_arch:build",
            None,
            str(tmp_path),
            weights=str(tmp_path / "ckpt.pt"),
            weights_key=weights_key,
        )

    assert model_hash(source("model"))["hash"] != model_hash(source("ema"))["hash"]
    assert model_hash(source("model"))["hash"] == model_hash(source("model"))["hash"]
