"""The facts advice reads from a model's files: the parameter count of each kind of
model file (advise/parameters.py, through facts.py), compared with the count the
framework itself gives for the same tiny model, and `bakeoff advise` printing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff import advise
from bakeoff.advise import parameters
from extras import require_module
from front_door import call
from tf_models import (
    FLOAT_TFLITE,
    H5_FILE,
    INT8_TFLITE,
    KERAS_FILE,
    ONE_INPUT_KERAS_FILE,
    SAVEDMODEL,
)
from torch_weights import RunsCode

# tests/tf_models.py's models, counted by hand: w1 64x32, b1 32, w2 32x10; an Embedding
# 50x4 and a Dense 12 -> 3; a Dense 5 -> 2; Dense 6 -> 4 -> 3.
SAVEDMODEL_PARAMS = 64 * 32 + 32 + 32 * 10
KERAS_PARAMS = 50 * 4 + 12 * 3 + 3
ONE_INPUT_KERAS_PARAMS = 5 * 2 + 2
H5_PARAMS = (6 * 4 + 4) + (4 * 3 + 3)
# The MLP the IR and TFLite tests write: Linear 8 -> 16 -> 4.
MLP_PARAMS = (8 * 16 + 16) + (16 * 4 + 4)


def _cnn() -> Any:
    """Parameters and float buffers (BatchNorm's running mean and variance) and one
    integer buffer (num_batches_tracked), which is no parameter."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 5),
    ).eval()


def _parameters_and_float_buffers(model: Any) -> int:
    params = sum(p.numel() for p in model.parameters())
    return params + sum(b.numel() for b in model.buffers() if b.is_floating_point())


def _mlp() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _torch_facts(weights: Path, weights_key: str | None = None) -> dict[str, Any]:
    return advise.model_facts("torch", None, str(weights), "arch:build", weights_key)


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    "name", ["f32", "bf16", "float16", "torch.float32", "F8_E4M3", "double", "i8", "u4", "nf4"]
)
def test_floating_and_low_bit_types_hold_parameters(name: str) -> None:
    assert parameters.counts_as_parameter(name)


@pytest.mark.parametrize("name", ["i64", "int32", "torch.int64", "I64", "boolean", "bool"])
def test_wide_integers_and_booleans_are_no_parameters(name: str) -> None:
    assert not parameters.counts_as_parameter(name)


# ---------------------------------------------------------------- torch weights


def test_state_dict_as_safetensors_and_pt_counts_parameters_and_float_buffers(
    tmp_path: Path,
) -> None:
    import torch
    from safetensors.torch import save_file

    model = _cnn()
    expected = _parameters_and_float_buffers(model)
    assert expected == sum(p.numel() for p in model.parameters()) + 2 * 4  # mean, var of 4
    save_file(model.state_dict(), tmp_path / "cnn.safetensors")
    torch.save(model.state_dict(), tmp_path / "cnn.pt")
    safetensors = _torch_facts(tmp_path / "cnn.safetensors")
    pickled = _torch_facts(tmp_path / "cnn.pt")
    assert (safetensors["params"], safetensors["params_source"]) == (expected, "safetensors header")
    assert (pickled["params"], pickled["params_source"]) == (expected, "state_dict tensors")
    assert pickled["custom"]


def test_tied_weights_in_a_pt_file_are_counted_once(tmp_path: Path) -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # the output layer shares the embedding
    torch.save(model.state_dict(), tmp_path / "tied.pt")
    assert len(model.state_dict()) == 2 and sum(p.numel() for p in model.parameters()) == 40
    assert _torch_facts(tmp_path / "tied.pt")["params"] == 40


def test_a_checkpoint_is_counted_at_its_weights_key(tmp_path: Path) -> None:
    import torch

    model = _mlp()
    torch.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    assert _torch_facts(tmp_path / "ckpt.pt", "model")["params"] == MLP_PARAMS
    whole = _torch_facts(tmp_path / "ckpt.pt")  # not a plain state_dict: said, not counted
    assert whole["params"] is None and 'weights_key = "model"' in whole["params_source"]


def test_a_pickle_that_would_run_code_is_refused_never_unpickled(tmp_path: Path) -> None:
    import torch

    marker = tmp_path / "ran"
    torch.save({"w": torch.zeros(3), "payload": RunsCode(marker)}, tmp_path / "evil.pt")
    facts = _torch_facts(tmp_path / "evil.pt")
    assert facts["params"] is None and "would run code" in facts["params_source"]
    assert not marker.exists()


def test_a_hugging_face_folder_without_safetensors_counts_its_pytorch_model_bin(
    tmp_path: Path,
) -> None:
    import torch

    config = {"architectures": ["BertModel"], "hidden_size": 4, "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 10}))
    state = {"embeddings.weight": torch.zeros(10, 4), "position_ids": torch.arange(8)}
    torch.save(state, tmp_path / "pytorch_model.bin")
    facts = advise.model_facts("hf", str(tmp_path), None, None)
    assert (facts["params"], facts["params_source"]) == (40, "state_dict tensors")


def test_without_weights_a_custom_model_is_not_built_to_count_it() -> None:
    facts = advise.model_facts("torch", None, None, "nowhere_at_all:build")
    assert facts["params"] is None and "would build the model" in facts["params_source"]


# ---------------------------------------------------------------- graphs


def _ir(tmp_path: Path, fp16: bool = False) -> Path:
    import openvino as ov
    import torch

    model = ov.convert_model(_mlp(), example_input=torch.zeros(1, 8))
    path = tmp_path / ("mlp16.xml" if fp16 else "mlp.xml")
    ov.save_model(model, str(path), compress_to_fp16=fp16)
    return path


def test_openvino_ir_counts_its_weight_constants_fp32_or_compressed(tmp_path: Path) -> None:
    fp32 = advise.model_facts("openvino", str(_ir(tmp_path)), None, None)
    assert (fp32["params"], fp32["params_source"]) == (MLP_PARAMS, "OpenVINO IR constants")
    # FP16 on disk is the same weights: counted as the parameters they stand for
    assert parameters.openvino_parameter_count(str(_ir(tmp_path, fp16=True))) == MLP_PARAMS


def test_openvino_ir_holds_batchnorm_folded_into_the_convolution(tmp_path: Path) -> None:
    """What the IR holds, not what torch had: the conversion folds BatchNorm away."""
    import openvino as ov
    import torch

    cnn = _cnn()
    path = tmp_path / "cnn.xml"
    ov.save_model(ov.convert_model(cnn, example_input=torch.zeros(1, 3, 8, 8)), str(path))
    folded = sum(p.numel() for name, p in cnn.named_parameters() if not name.startswith("1."))
    assert parameters.openvino_parameter_count(str(path)) == folded


def test_onnx_counts_weight_initializers_and_constants_not_shapes_or_scalars(
    tmp_path: Path,
) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [
        numpy_helper.from_array(np.ones((3, 4), np.float32), "w"),
        numpy_helper.from_array(np.array([3, 4], np.int64), "shape"),  # no parameter
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),  # a setting
    ]
    bias = helper.make_node(
        "Constant", [], ["b"], value=numpy_helper.from_array(np.zeros(3, np.float32))
    )
    nodes = [
        bias,
        helper.make_node("Reshape", ["x", "shape"], ["x2"]),
        helper.make_node("Gemm", ["x2", "w", "b"], ["g"], transB=1),
        helper.make_node("Add", ["g", "eps"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])],
        weights,
    )
    onnx.save(helper.make_model(graph), tmp_path / "fc.onnx")
    facts = advise.model_facts("onnx", str(tmp_path / "fc.onnx"), None, None)
    assert (facts["params"], facts["params_source"]) == (3 * 4 + 3, "ONNX initializers")


def _tflite_fully_connected(path: Path) -> None:
    """A one-operator TFLite file (x [1, 4] -> FULLY_CONNECTED with w [3, 4] and
    b [3]), written with LiteRT's flatbuffer schema: no TensorFlow."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as tfl

    def tensor(name: str, shape: tuple[int, ...], buffer: int) -> Any:
        t = tfl.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), tfl.TensorType.FLOAT32, buffer
        return t

    def buffer(array: np.ndarray | None = None) -> Any:
        b = tfl.BufferT()
        b.data = None if array is None else list(array.astype("<f4").tobytes())
        return b

    graph = tfl.SubGraphT()
    graph.tensors = [tensor("x", (1, 4), 1), tensor("w", (3, 4), 2), tensor("b", (3,), 3)]
    graph.tensors.append(tensor("y", (1, 3), 4))
    graph.inputs, graph.outputs = [0], [3]
    op = tfl.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1, 2], [3]
    op.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
    op.builtinOptions = tfl.FullyConnectedOptionsT()
    graph.operators = [op]
    code = tfl.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = tfl.BuiltinOperator.FULLY_CONNECTED
    code.version = 1
    model = tfl.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [code], [graph]
    model.buffers = [buffer(), buffer(), buffer(np.ones((3, 4))), buffer(np.zeros(3)), buffer()]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(builder.Output())


def test_tflite_counts_its_constant_tensors(tmp_path: Path) -> None:
    require_module("ai_edge_litert", "pip install 'bakeoff[frameworks]'")
    path = tmp_path / "fc.tflite"
    _tflite_fully_connected(path)
    assert parameters.tflite_parameter_count(str(path)) == 3 * 4 + 3
    facts = advise.model_facts("tflite", str(path), None, None)  # once the kind exists
    assert facts["params"] == 15 and "TFLite" in facts["params_source"]


# ---------------------------------------------------------------- TensorFlow, Keras


def test_savedmodel_counts_its_variables_without_tensorflow(tf_models: Path) -> None:
    facts = advise.model_facts("savedmodel", str(tf_models / SAVEDMODEL), None, None)
    assert facts["params"] == SAVEDMODEL_PARAMS
    assert facts["params_source"] == "SavedModel variables, read by OpenVINO"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (KERAS_FILE, KERAS_PARAMS),
        (ONE_INPUT_KERAS_FILE, ONE_INPUT_KERAS_PARAMS),
        (H5_FILE, H5_PARAMS),
    ],
)
def test_keras_files_count_their_weights_without_keras(
    tf_models: Path, name: str, expected: int
) -> None:
    facts = advise.model_facts("keras", str(tf_models / name), None, None)
    assert (facts["params"], facts["params_source"]) == (expected, "Keras weights (HDF5 shapes)")


def test_a_keras_file_not_written_yet_is_unknown_not_an_error(tmp_path: Path) -> None:
    facts = advise.model_facts("keras", str(tmp_path / "digits.keras"), None, None)
    assert facts["params"] is None and "does not exist yet" in facts["params_source"]


def test_an_unreadable_ir_is_unknown_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "broken.xml").write_text("<net>")
    facts = advise.model_facts("openvino", str(tmp_path / "broken.xml"), None, None)
    assert facts["params"] is None and facts["params_source"].startswith("unknown (cannot read")


# ---------------------------------------------------------------- bakeoff advise


def _words(text: str) -> str:
    """The terminal's text with its line wrapping undone."""
    return " ".join(text.split())


def test_advise_prints_the_count_of_an_ir_given_alone(tmp_path: Path) -> None:
    shown = call("advise", str(_ir(tmp_path)), "--target", "server-cpu")
    assert shown.code == 0, shown.stderr
    assert f"kind openvino, {MLP_PARAMS} parameters" in _words(shown.stdout)
    as_json = call("advise", str(_ir(tmp_path)), "--target", "server-cpu", "--json")
    doc = json.loads(as_json.stdout)
    assert doc["facts"]["params"] == MLP_PARAMS
    assert doc["facts"]["params_source"] == "OpenVINO IR constants"


@pytest.mark.parametrize("name", [FLOAT_TFLITE, INT8_TFLITE])
def test_advise_on_a_tflite_file_alone_proposes_litert_and_openvino(
    name: str, tf_models: Path
) -> None:
    """Its count printed; LiteRT (the file as it is) and OpenVINO proposed; NNCF INT8
    only for the float file; a quantized file named as its own reference."""
    args = ("advise", str(tf_models / name), "--target", "server-cpu")
    shown = call(*args)
    assert shown.code == 0, shown.stderr
    assert "kind tflite," in _words(shown.stdout) and " parameters" in shown.stdout
    doc = json.loads(call(*args, "--json").stdout)
    assert doc["facts"]["params"] > 0 and "TFLite" in doc["facts"]["params_source"]
    by_id = {a["id"]: a for a in doc["advice"]}
    proposed = by_id["tflite-runtimes"]["proposes"]
    assert ["litert", "fp32"] in proposed and ["openvino", "fp32"] in proposed
    quantized = name == INT8_TFLITE
    assert doc["facts"]["quantized"] == ("int8" if quantized else None)
    assert (["openvino", "int8"] in proposed) is not quantized
    assert ("already int8" in by_id["reference"]["reason"]) is quantized


def test_advise_prints_the_count_of_a_savedmodel_given_alone(tf_models: Path) -> None:
    shown = call("advise", str(tf_models / SAVEDMODEL), "--target", "server-cpu")
    assert shown.code == 0, shown.stderr
    assert "kind savedmodel, 2.4K parameters" in _words(shown.stdout)


def test_advise_prints_the_count_of_a_torch_workloads_weights(tmp_path: Path) -> None:
    import torch

    torch.save(_mlp().state_dict(), tmp_path / "mlp.pt")
    np.savez(tmp_path / "x.npz", x=np.zeros((2, 8), np.float32))
    workload = tmp_path / "w.toml"
    workload.write_text(
        'name = "mlp"\n[model]\nkind = "torch"\nfactory = "arch:build"\nweights = "mlp.pt"\n'
        '[data]\npath = "x.npz"\n'
    )
    shown = call("advise", str(workload), "--target", "server-cpu")
    assert shown.code == 0, shown.stderr
    assert f"kind torch, {MLP_PARAMS} parameters" in _words(shown.stdout)
