"""The training stacks beyond PyTorch on the real libraries: Keras 3 on JAX,
TensorFlow and PyTorch, and Flax with optax under jax.jit, each training the digits
CNN's twin from the very PyTorch seed weights the torch stacks load.

make test trains each for a few steps in a worker of its own; the whole run of all
four beside torch (timed rounds, then a fresh worker per seed, about 2 minutes of
imports and rounds on 2 cores) is `slow`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff import stacks
from short_recipe import short_run, steps_like_the_reference, train_alone, trains_like_the_reference

FRAMEWORKS = ("jax", "keras-jax", "keras-tensorflow", "keras-torch")


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return train_alone(tmp_path_factory.mktemp("alone"), ("torch", *FRAMEWORKS))


@pytest.mark.parametrize("stack", FRAMEWORKS)
def test_each_framework_takes_the_references_steps_from_the_same_weights(
    alone: dict[str, dict], stack: str
) -> None:
    mine = alone[stack]
    steps_like_the_reference(mine, alone["torch"])
    settings = mine["settings"]
    assert settings["optimizer_state"] == "float32" and settings["lr"] == 0.002
    assert settings["trainable_parameters"] == alone["torch"]["settings"]["trainable_parameters"]
    if stack.startswith("keras-"):
        assert settings["keras_backend"] == stack.removeprefix("keras-")
        assert mine["checkpoint"]["format"].startswith("Keras' .weights.h5")
    else:
        assert settings["model"] == "flax.linen"
        assert mine["checkpoint"]["format"].startswith("Flax's msgpack")
    # JAX compiles (jax.jit, and Keras' jitted train function), TensorFlow traces its
    # tf.function: the settings name the compiler, and the first step's extra time is
    # reported apart. Keras on PyTorch runs eagerly and names none.
    assert ("compile_backend" in settings) is (stack != "keras-torch")
    if stack != "keras-torch":
        assert mine["compile_s"] > 0


@pytest.fixture(scope="module")
def framework_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return short_run(tmp_path_factory.mktemp("frameworks"), ("torch", *FRAMEWORKS))


@pytest.mark.slow
@pytest.mark.parametrize("stack", FRAMEWORKS)
def test_each_framework_trains_the_same_model_from_the_same_weights(
    framework_run: dict, stack: str
) -> None:
    by = {c["id"]: c for c in framework_run["candidates"]}
    mine, ref = by[stack], by["torch"]
    # ok: its first loss (the seed weights on the first batch, before any update)
    # was the reference's to 1e-4, so the weights came over exactly, layout and all.
    assert mine["status"] == "ok", mine["reason"]
    assert mine["processes"] == 1 and mine["threads_per_process"] == 2
    assert mine["trainable_parameters"] == ref["trainable_parameters"]
    sps = mine["samples_per_s"]
    assert sps["ci95"][0] <= sps["value"] <= sps["ci95"][1]
    assert 0 <= mine["data_wait_share"] < 1 and mine["peak_rss_mb"]["max_rank"] > 0
    trains_like_the_reference(mine, ref)
    # Two steps after the reload equal the two without it: weights and the
    # optimizer's moments and step count came back.
    ck = mine["checkpoint"]
    assert ck["reload_identical"] is True and ck["steps_compared"] == 2 and ck["size_mb"] > 0
    settings = mine["settings"]
    assert settings["optimizer_state"] == "float32" and settings["lr"] == 0.002
    if stack.startswith("keras-"):
        assert settings["keras_backend"] == stack.removeprefix("keras-")
        assert ck["format"].startswith("Keras' .weights.h5")
    else:
        assert settings["model"] == "flax.linen" and ck["format"].startswith("Flax's msgpack")
    # JAX compiles (jax.jit, and Keras' jitted train function), TensorFlow traces its
    # tf.function: the first step's extra time is reported apart. Keras on PyTorch
    # runs eagerly and reports none.
    if stack == "keras-torch":
        assert mine["compile_s"] is None
    else:
        assert mine["compile_s"] is not None and mine["compile_s"] >= 0


def test_a_model_without_a_twin_is_unavailable_on_those_stacks_and_says_why() -> None:
    for stack in FRAMEWORKS:
        why = stacks.availability(stack, "my_models:net")
        assert why and "my_models:net" in why and "twin" in why
        assert stacks.availability(stack, "bakeoff.builtins.digits:untrained") is None
    assert stacks.availability("torch", "my_models:net") is None


def test_the_twins_weights_give_the_torch_models_logits(tmp_path: Path) -> None:
    """The layout mapping itself (OIHW to HWIO, the flatten's row order), checked on
    Flax's forward pass against PyTorch's on the same seed weights."""
    import numpy as np
    import torch

    from bakeoff.builtins import digits
    from bakeoff.stacks import twins

    torch.manual_seed(3)
    model = digits.untrained().eval()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    x = digits.train_and_validation()[0][:16]
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    twin = twins.twin(twins.DIGITS)
    assert twin is not None
    got = twin.flax_module().apply({"params": twin.flax_params(state)}, twin.images(x))
    assert np.allclose(np.asarray(got), expected, atol=1e-5)
