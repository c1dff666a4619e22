"""Keras 3 on JAX, TensorFlow and PyTorch, its ONNX export and LiteRT, on a tiny real
model; and the orchestrator never importing a framework that only workers use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api
from bakeoff.errors import UserError
from bakeoff.workload import parse_spec

FRAMEWORKS = ("keras", "jax", "tensorflow", "ai_edge_litert")

# Unseeded on purpose: each backend would draw different initial weights, so
# fp32 agreeing across backends shows that the run's one saved copy is used.
FACTORY = textwrap.dedent(
    """
    import keras


    def build():
        return keras.Sequential(
            [
                keras.Input((16,), name="features"),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(4),
            ]
        )
    """
)

CANDIDATES = [
    ("kj", "keras-jax", "fp32", None),
    ("kt", "keras-tensorflow", "fp32", None),
    ("kp", "keras-torch", "fp32", None),
    ("l32", "litert", "fp32", None),
    ("l8", "litert", "int8", "static"),
    ("ort", "onnxruntime", "fp32", None),
]


def _workload(tmp_path: Path, candidates: list = CANDIDATES, compiled: bool = False) -> Path:
    (tmp_path / "tiny_keras_factory.py").write_text(FACTORY)
    x = np.random.default_rng(0).normal(size=(96, 16)).astype(np.float32)
    np.savez(tmp_path / "data.npz", input=x)
    lines = [
        'name = "tiny-keras"',
        "[model]",
        'kind = "keras"',
        'factory = "tiny_keras_factory:build"',
        "[data]",
        'path = "data.npz"',
        "[quality]",
        'metric = "cosine"',
        "max_drop = 0.05",
        "[search]",
        "batch_sizes = [4]",
    ]
    for label, runtime, precision, method in candidates:
        lines += [
            "[[candidates]]",
            f'label = "{label}"',
            f'runtime = "{runtime}"',
            f'precision = "{precision}"',
        ]
        if method:
            lines.append(f'method = "{method}"')
    if compiled:  # Keras on torch as Keras runs it on JAX and TensorFlow: compiled.
        lines += [
            "[[candidates]]",
            'label = "kpc"',
            'runtime = "keras-torch"',
            'precision = "fp32"',
            "options = { jit_compile = true }",
        ]
    path = tmp_path / "w.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_keras_on_three_backends_litert_and_onnx_without_imports_in_main(
    tmp_path: Path, store_path: Path
) -> None:
    before = set(sys.modules)
    out = tmp_path / "out.json"
    result = api.run(
        str(_workload(tmp_path)),
        api.RunOptions(quick=True, store=store_path, json_path=out, budget_s=3, threads=1),
    )
    imported = {m.split(".")[0] for m in set(sys.modules) - before}
    assert not imported & set(FRAMEWORKS), sorted(imported & set(FRAMEWORKS))
    doc = json.loads(out.read_text())
    cands = {c["label"]: c for c in doc["candidates"]}
    assert result.exit_code == 0
    for label, runtime, precision, _ in CANDIDATES:
        c = cands[label]
        assert c["status"] == "ok", (label, c["reason"])
        assert c["runtime"] == runtime and c["precision"] == precision
        assert c["quality"]["metric"] == "cosine"
        assert c["latency_ms"]["ci95"]["p50"][0] <= c["latency_ms"]["p50"]
        if precision == "fp32":  # the same saved weights on every backend and export
            assert c["quality"]["drop"] < 1e-4, (label, c["quality"])
    for label, backend in (("kj", "jax"), ("kt", "tensorflow"), ("kp", "torch")):
        settings = cands[label]["settings"]
        assert settings["keras_backend"] == backend
        assert settings["dtype_policy"] == "float32"
    assert cands["kt"]["settings"]["jit_compile"] is True
    assert cands["kp"]["settings"]["compiled"] is False  # Keras' own default on torch
    assert cands["l8"]["settings"]["quantization"]["method"] == "static"
    assert cands["l8"]["settings"]["num_threads"] == 1
    assert cands["ort"]["exporter"] == "keras-torch"
    assert doc["verdicts"] and all(v["winner"] for v in doc["verdicts"])
    _litert_export_runs_alone(result.run_id, cands["l8"]["id"], store_path, tmp_path)


@pytest.mark.slow
def test_keras_on_torch_compiled_as_on_jax_and_tensorflow(tmp_path: Path, store_path: Path) -> None:
    """Slow (make test-slow): its first call is an inductor compile, 33 s of CPU, the
    better part of the run above when it was one of its candidates."""
    wl = _workload(tmp_path, [c for c in CANDIDATES if c[0] == "kp"], compiled=True)
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=2, threads=1))
    compiled = {c["label"]: c for c in result.document["candidates"]}["kpc"]
    assert compiled["status"] == "ok", compiled["reason"]
    assert compiled["settings"]["compiled"] is True
    assert compiled["settings"]["compile_backend"] == "inductor"
    assert compiled["quality"]["drop"] < 1e-4


EXPORT_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import bakeoff.export

    predict = bakeoff.export.load(sys.argv[1])
    with np.load(sys.argv[2], allow_pickle=False) as z:
        x = z["quality/input"]
    n = len(x) - len(x) % 4
    at_4 = np.concatenate([predict({"input": x[i : i + 4]}) for i in range(0, n, 4)])
    at_3 = predict({"input": x[:3]})  # another batch size: the interpreter is resized
    np.save(sys.argv[3], at_4)
    heavy = ("keras", "jax", "tensorflow", "torch", "onnxruntime", "openvino")
    print(json.dumps({
        "same_at_3": bool(np.allclose(at_3, at_4[:3], atol=1e-6)),
        "imported": [m for m in heavy if m in sys.modules],
    }))
    """
)


def _litert_export_runs_alone(run_id: str, cid: str, store: Path, tmp_path: Path) -> None:
    """The LiteRT INT8 candidate exported: the measured .tflite, loaded by LiteRT alone,
    gives the outputs that were quality-checked."""
    from bakeoff import export

    out = tmp_path / "export-litert"
    manifest = export.export(run_id, out, cid, store)
    assert manifest["runtime"] == "litert" and manifest["precision"] == "int8"
    assert set(manifest["files"]) == {"model.tflite"}
    assert manifest["model_verified_against_run"] is True
    assert manifest["load"] == {"num_threads": 1}
    run_dir = store.parent / "runs" / run_id
    outputs = tmp_path / "exported.npy"
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_CHILD, str(out), str(run_dir / "data.npz"), str(outputs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"same_at_3": True, "imported": []}
    measured = np.load(run_dir / "outputs" / f"{cid}.npy")
    got = np.load(outputs)
    np.testing.assert_allclose(got, measured[: len(got)], rtol=1e-5, atol=1e-6)


def test_keras_spec_validation_names_the_problem() -> None:
    def spec(model: str) -> None:
        parse_spec(f'name = "x"\n[model]\n{model}\n[data]\npath = "d.npz"\n', "w.toml")

    with pytest.raises(UserError, match=r"legacy \.h5 / \.hdf5 file, got 'model\.pb'"):
        spec('kind = "keras"\npath = "model.pb"')
    with pytest.raises(UserError, match="exactly one of path"):
        spec('kind = "keras"\npath = "m.keras"\nfactory = "m:f"')
    with pytest.raises(UserError, match="exactly one of path"):
        spec('kind = "keras"')
    with pytest.raises(UserError, match="savedmodel"):
        spec('kind = "keras"\npath = "saved_model_dir"')
    spec('kind = "keras"\npath = "m.keras"')
    spec('kind = "keras"\npath = "model.h5"')  # legacy HDF5, through Keras 3's loader
    spec('kind = "keras"\npath = "MODEL.HDF5"')


CHILD = textwrap.dedent(
    """
    import sys
    from bakeoff.keras_models import load_keras_model, set_keras_backend
    from bakeoff.source import ModelSource

    keras = set_keras_backend("jax")
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Lambda(lambda t: t * 2), keras.layers.Dense(2)]
    )
    model.save(sys.argv[1])
    source = ModelSource(kind="keras", factory=None, path=sys.argv[1], base_dir=None)
    try:
        load_keras_model(source, "jax")
    except ValueError as exc:
        print("REFUSED:", exc)
    try:
        set_keras_backend("torch")
    except RuntimeError as exc:
        print("CLASH:", exc)
    """
)


def test_keras_file_loads_safely_and_one_backend_per_process(tmp_path: Path) -> None:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}  # the user's default is overridden
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "lambda.keras")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REFUSED:" in done.stdout and "safe_mode=True" in done.stdout
    assert "CLASH:" in done.stdout and "'jax' backend" in done.stdout


def test_litert_inputs_follow_the_data_by_name_not_by_order() -> None:
    """The converter names inputs serving_default_<keras name>:0; a model whose inputs
    come in another order than the data's arrays still gets each array where it belongs."""
    from bakeoff.backends.litert import LiteRtRunner
    from bakeoff.backends.tflite_io import plain_input_name

    runner = LiteRtRunner.__new__(LiteRtRunner)  # the mapping only; no interpreter needed
    runner.model_inputs = [
        (plain_input_name("serving_default_mask:0"), np.int32),
        (plain_input_name("serving_default_tokens:0"), np.float32),
    ]
    tokens, mask = np.ones((2, 4), np.float64), np.zeros((2, 4), np.int64)
    first, second = runner.prepare({"tokens": tokens, "mask": mask})
    assert first.dtype == np.int32 and not first.any()  # the mask, cast to the model's dtype
    assert second.dtype == np.float32 and second.all()


SIZE_CHILD = textwrap.dedent(
    """
    import json, sys
    from bakeoff.backends import LoadContext, Variant, get_backend
    from bakeoff.keras_models import set_keras_backend
    from bakeoff.sizes import artifact_bytes, model_bytes
    from bakeoff.source import ModelSource

    keras = set_keras_backend("jax")
    model = keras.Sequential(
        [keras.Input((16,), name="features"), keras.layers.Dense(32), keras.layers.Dense(4)]
    )
    model.save(sys.argv[1])
    source = ModelSource(kind="keras", factory=None, path=sys.argv[1], base_dir=None)
    artifact = {"path": sys.argv[1]}
    sizes = {"file": artifact_bytes(artifact)}
    for precision in ("fp32", "int8"):
        ctx = LoadContext(source=source, threads=1, batch_size=2, input_names=("features",))
        runner = get_backend("keras-jax").load(Variant("keras-jax", precision), artifact, ctx)
        sizes[precision] = model_bytes(runner, artifact)
    print(json.dumps(sizes))
    """
)


# Make test runs LiteRT INT8 in the three-backend run.
@pytest.mark.slow  # a LiteRT INT8 conversion of its own (~14 s)
def test_keras_int8_size_is_its_quantized_weights_not_the_fp32_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIZE_CHILD, str(tmp_path / "m.keras")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert sizes["fp32"] == sizes["file"]  # nothing changed at load: the file is what runs
    # int8 kernels (16x32 + 32x4) plus float32 biases (32 + 4) and per-channel scales (32 + 4)
    assert sizes["int8"] == (16 * 32 + 32 * 4) + 4 * (32 + 4) + 4 * (32 + 4)
