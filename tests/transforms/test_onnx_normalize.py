"""ONNX files from other converters (paddle2onnx, tf2onnx, older exporters): weights
as Constant nodes, initializers listed among the graph inputs. ONNX Runtime's
quantizers need the weights as initializers; bakeoff normalizes a user's file
first (transforms/onnx_normalize.py), and a step that still fails says which
library call failed and what to try instead.

The models are written with onnx.helper, as such a converter would write them.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api


def _digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return (load_digits().data / 16.0).astype(np.float32)


def _foreign_onnx(
    path: Path, *, computed_weight: bool = False, external_data: bool = False
) -> None:
    """A small conv net on the 8x8 digits: (N, 64) -> (N, 10).

    The convolution's weights and bias (and the Reshape's shape) are Constant
    nodes, as paddle2onnx writes them; the classifier's are initializers that
    are also listed among the graph inputs, as IR-3-era converters did. With
    `computed_weight` the kernel is a Mul of two constants, which lifting
    constants cannot make an initializer.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
        tensor = numpy_helper.from_array(value, name)
        return helper.make_node("Constant", [], [name], name=f"{name}_constant", value=tensor)

    kernel = rng.normal(0.0, 0.3, (8, 1, 3, 3)).astype(np.float32)
    nodes = [
        constant("shape", np.array([-1, 1, 8, 8], np.int64)),
        helper.make_node("Reshape", ["x", "shape"], ["image"]),
        constant("conv2d_0.b_0", rng.normal(0.0, 0.1, 8).astype(np.float32)),
    ]
    if computed_weight:
        nodes += [
            constant("conv2d_0.w_raw", kernel),
            constant("conv2d_0.w_scale", np.full((8, 1, 1, 1), 0.5, np.float32)),
            helper.make_node("Mul", ["conv2d_0.w_raw", "conv2d_0.w_scale"], ["conv2d_0.w_0"]),
        ]
    else:
        nodes.append(constant("conv2d_0.w_0", kernel))
    nodes += [
        helper.make_node("Conv", ["image", "conv2d_0.w_0", "conv2d_0.b_0"], ["conv"]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("Flatten", ["relu"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc_0.w_0"], ["logits_raw"]),
        helper.make_node("Add", ["logits_raw", "fc_0.b_0"], ["logits"]),
    ]
    fc = {
        "fc_0.w_0": rng.normal(0.0, 0.1, (8 * 6 * 6, 10)).astype(np.float32),
        "fc_0.b_0": rng.normal(0.0, 0.1, 10).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "foreign",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64]),
            *(helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in fc.items()),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in fc.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="paddle2onnx"
    )
    onnx.checker.check_model(model)
    if external_data:  # Constant attributes too, as onnx does for a large model
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            location=path.name + ".data",
            convert_attribute=True,
        )
    else:
        onnx.save(model, str(path))


def _session(path: Path | str) -> object:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _run(path: Path | str, x: np.ndarray) -> np.ndarray:
    return np.asarray(_session(path).run(None, {"x": x})[0])  # type: ignore[attr-defined]


def _graph(path: Path | str) -> object:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


@pytest.mark.parametrize("external_data", [False, True])
def test_normalization_lifts_constants_and_drops_initializer_inputs(
    tmp_path: Path, external_data: bool
) -> None:
    from bakeoff.transforms.onnx_normalize import quantizer_input

    user = tmp_path / "user"
    user.mkdir()
    src = user / "model.onnx"
    _foreign_onnx(src, external_data=external_data)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    user_file = {"path": str(src), "exporter": "user-provided"}

    path, normalization = quantizer_input(user_file, str(artifacts))
    assert normalization is not None and normalization["applied"]
    # shape, conv weight and bias lifted; the classifier's two weights left the inputs
    assert normalization["constants_lifted"] == 3
    assert normalization["initializer_inputs_removed"] == 2
    assert normalization["shapes_inferred"] > 0
    assert "LiftConstantsToInitializersPass" in normalization["passes"][0]
    assert normalization["external_data"] == ("model.onnx.data" if external_data else None)
    assert Path(path) == artifacts / "onnx-normalized" / "model.onnx"
    assert (Path(path).parent / "model.onnx.data").exists() == external_data

    graph = _graph(path)
    assert [n.op_type for n in graph.node] == [
        "Reshape",
        "Conv",
        "Relu",
        "Flatten",
        "MatMul",
        "Add",
    ]  # type: ignore[attr-defined]
    assert [i.name for i in graph.input] == ["x"]  # type: ignore[attr-defined]
    x = _digits()[:16]
    np.testing.assert_allclose(_run(path, x), _run(src, x), rtol=1e-6, atol=1e-6)
    # The user's file is untouched: it stays the FP32 reference.
    assert len(_graph(src).input) == 3  # type: ignore[attr-defined]

    # Once per run: the next step reuses the normalized file.
    again, _ = quantizer_input(user_file, str(artifacts))
    assert again == path
    assert (artifacts / "onnx-normalized" / "step.json").exists()


def test_files_this_run_exported_are_not_normalized(tmp_path: Path) -> None:
    from bakeoff.transforms.onnx_normalize import quantizer_input

    exported = tmp_path / "artifacts" / "onnx-fp32" / "model.onnx"
    exported.parent.mkdir(parents=True)
    _foreign_onnx(exported)
    path, normalization = quantizer_input(
        {"path": str(exported), "exporter": "dynamo"}, str(tmp_path / "artifacts")
    )
    assert (path, normalization) == (str(exported), None)
    assert not (tmp_path / "artifacts" / "onnx-normalized").exists()


def test_a_weight_normalization_cannot_fix_fails_with_the_step_and_what_to_try(
    tmp_path: Path,
) -> None:
    from bakeoff.transforms import StepFailed
    from bakeoff.transforms.onnx_normalize import quantizer_input
    from bakeoff.transforms.ort_quantize import dynamic_int8

    src = tmp_path / "user" / "model.onnx"
    src.parent.mkdir()
    _foreign_onnx(src, computed_weight=True)
    out = tmp_path / "artifacts" / "ort-int8-dynamic"
    out.mkdir(parents=True)
    source, normalized = quantizer_input(
        {"path": str(src), "exporter": "user-provided"}, str(out.parent)
    )
    with pytest.raises(StepFailed) as failed:
        dynamic_int8(source, out, normalized)
    reason = str(failed.value)
    # which library call, its own message, what was tried, and what to try instead
    assert reason.startswith(
        "ONNX Runtime dynamic INT8 quantization (onnxruntime.quantization.quantize_dynamic) "
        "failed: ValueError: Expected conv2d_0.w_0 to be an initializer"
    )
    assert "after normalizing the file: 4 Constant nodes lifted to initializers" in reason
    assert "Try the openvino int8 nncf candidate" in reason
    assert "re-export the model with its weights as initializers" in reason


def test_openvino_conversion_failure_names_the_call_and_alternatives(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from bakeoff.transforms import StepFailed
    from bakeoff.transforms.openvino_convert import ir_from_onnx

    graph = helper.make_graph(
        [helper.make_node("Wobble", ["x"], ["y"], domain="acme")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("acme", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(tmp_path / "custom.onnx"))
    with pytest.raises(StepFailed) as failed:
        ir_from_onnx(str(tmp_path / "custom.onnx"), tmp_path)
    reason = str(failed.value)
    assert reason.startswith("OpenVINO conversion of the ONNX file (openvino.convert_model) failed")
    assert "acme.Wobble" in reason  # OpenVINO's own message names the operator
    assert "Try the onnxruntime candidates" in reason


def test_openvino_nncf_int8_on_constant_weights(tmp_path: Path) -> None:
    """OpenVINO converts the user's file as given (no normalization) and NNCF
    quantizes it: the alternative the ONNX Runtime failures point to."""
    from bakeoff.transforms.nncf_quantize import nncf_int8
    from bakeoff.transforms.openvino_convert import ir_from_onnx

    src = tmp_path / "model.onnx"
    _foreign_onnx(src)
    (tmp_path / "ov-fp32").mkdir()
    (tmp_path / "ov-int8-nncf").mkdir()
    ir = ir_from_onnx(str(src), tmp_path / "ov-fp32")
    calibration = {"x": _digits()[:32]}
    art = nncf_int8(ir["path"], tmp_path / "ov-int8-nncf", calibration, transformer=False)
    import openvino as ov

    model = ov.Core().read_model(art["path"])
    assert [p.get_any_name() for p in model.inputs] == ["x"]  # the listed weights are no inputs
    assert any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = _digits()[:16]
    out, ref = np.asarray(compiled(x)[0]), _run(src, x)
    cos = (out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.95


def test_run_quantizes_a_foreign_onnx_model_with_onnxruntime(
    tmp_path: Path, store_path: Path
) -> None:
    _foreign_onnx(tmp_path / "model.onnx")
    np.savez(tmp_path / "inputs.npz", x=_digits())
    wl = tmp_path / "workload.toml"
    wl.write_text(
        textwrap.dedent(
            """
            name = "foreign-onnx"
            [model]
            kind = "onnx"
            path = "model.onnx"
            [data]
            path = "inputs.npz"
            [quality]
            metric = "cosine"
            max_drop = 0.05
            [search]
            runtimes = ["onnxruntime"]
            precisions = ["fp32", "int8"]
            batch_sizes = [1]
            """
        )
    )
    opts = api.RunOptions(quick=True, store=store_path, batch_sizes=[1], budget_s=1)
    result = api.run(str(wl), opts)
    cands = {c["id"]: c for c in result.document["candidates"]}

    fp32 = cands["onnxruntime-fp32-b1"]
    assert fp32["status"] == "ok", fp32["reason"]
    assert fp32["exporter"] == "user-provided"
    assert "quantization" not in fp32["settings"]  # the user's file, as given
    for cid in ("onnxruntime-int8-dynamic-b1", "onnxruntime-int8-static-b1"):
        c = cands[cid]
        assert c["status"] in ("ok", "rejected"), (cid, c["reason"])
        assert c["quality"]["metric"] == "cosine" and c["quality"]["drop"] is not None
        normalization = c["settings"]["quantization"]["onnx_normalization"]
        assert normalization["constants_lifted"] == 3, cid
        assert normalization["initializer_inputs_removed"] == 2, cid
    # One normalized file for both quantizers, built once.
    artifacts = store_path.parent / "runs" / result.document["run_id"] / "artifacts"
    steps = [json.loads(line)["step"] for line in (artifacts / "steps.jsonl").open()]
    assert steps.count("onnx-normalized") == 2  # built, then reused from this run
    assert (artifacts / "onnx-normalized" / "model.onnx").exists()
