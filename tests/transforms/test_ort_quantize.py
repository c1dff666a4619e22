"""FP16, BF16 and INT4 on ONNX Runtime and PyTorch: the transforms on tiny models, the
offers that say why a precision is unavailable, and one real run of every variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api
from tiny_mlp import TINY_MLP, mlp_onnx, write_tiny_workload

MODEL_MODULE = TINY_MLP


def _workload(
    tmp_path: Path, runtimes: list[str], precisions: list[str], batch_sizes: list[int]
) -> Path:
    search = f"""
    [search]
    runtimes = {json.dumps(runtimes)}
    precisions = {json.dumps(precisions)}
    batch_sizes = {json.dumps(batch_sizes)}
    """
    return write_tiny_workload(tmp_path, MODEL_MODULE, search)


def _tiny_onnx(tmp_path: Path) -> Path:
    """A two-layer MLP as ONNX; the TorchScript exporter writes each Linear as Gemm."""
    return mlp_onnx(tmp_path / "mlp.onnx", (64, 64, 16))


def _session(path: Path) -> object:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _x(n: int = 16) -> np.ndarray:
    return np.random.default_rng(0).random((n, 64), np.float32)


def test_ort_float16_keeps_float32_io_and_reports_cpu_kernels(tmp_path: Path) -> None:
    import onnx

    from bakeoff.transforms.ort_float16 import float16

    src = _tiny_onnx(tmp_path)
    (tmp_path / "fp16").mkdir()
    art = float16(str(src), tmp_path / "fp16", {"x": _x(2)})
    model = onnx.load(art["path"])
    dtypes = {init.name: init.data_type for init in model.graph.initializer}
    assert dtypes and set(dtypes.values()) == {onnx.TensorProto.FLOAT16}
    io = [*model.graph.input, *model.graph.output]
    assert {v.type.tensor_type.elem_type for v in io} == {onnx.TensorProto.FLOAT}
    q = art["quantization"]
    assert q["keep_io_types"] is True and q["float16_initializers"] == len(dtypes)
    # What the CPU provider ran: Gemm has no float16 CPU kernel, so it runs in float32.
    kernels = q["cpu_kernels"]
    assert "Gemm" in kernels["float32_ops"]
    assert kernels["float16_nodes"] + kernels["float32_nodes"] > 0
    assert not list((tmp_path / "fp16").glob("profile*.json"))  # profile file removed
    ref = _session(src).run(None, {"x": _x()})[0]  # type: ignore[attr-defined]
    out = _session(Path(art["path"])).run(None, {"x": _x()})[0]  # type: ignore[attr-defined]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=5e-3)


def test_ort_int4_rewrites_gemm_and_quantizes_to_matmulnbits(tmp_path: Path) -> None:
    import onnx

    from bakeoff.transforms.ort_quantize import _gemm_to_matmul, int4_weight_only

    src = _tiny_onnx(tmp_path)
    # The Gemm -> MatMul + Add rewrite alone is exact.
    model = onnx.load(str(src))
    assert _gemm_to_matmul(model) == 2
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Add", "Relu", "MatMul", "Add"]
    onnx.save(model, str(tmp_path / "rewritten.onnx"))
    ref = _session(src).run(None, {"x": _x()})[0]  # type: ignore[attr-defined]
    same = _session(tmp_path / "rewritten.onnx").run(None, {"x": _x()})[0]  # type: ignore[attr-defined]
    np.testing.assert_allclose(same, ref, rtol=1e-5, atol=1e-6)

    (tmp_path / "int4").mkdir()
    art = int4_weight_only(str(src), tmp_path / "int4", block_size=32)
    q = art["quantization"]
    assert q["block_size"] == 32 and q["bits"] == 4 and q["symmetric"] is True
    assert q["quantized_matmuls"] == 2 and q["gemm_rewritten_to_matmul"] == 2
    ops = [n.op_type for n in onnx.load(art["path"]).graph.node]
    assert ops.count("MatMulNBits") == 2 and "Gemm" not in ops
    out = _session(Path(art["path"])).run(None, {"x": _x()})[0]  # type: ignore[attr-defined]
    cos = (out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.99


def test_ort_int4_without_weights_fails_with_reason(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from bakeoff.transforms import StepFailed
    from bakeoff.transforms.ort_quantize import int4_weight_only

    # activation x activation only: nothing has a weight to quantize
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "mm.onnx"))
    with pytest.raises(StepFailed, match="no MatMul/Gemm with a constant 2-D weight"):
        int4_weight_only(str(tmp_path / "mm.onnx"), tmp_path, block_size=32)


def test_ort_bf16_is_unavailable_because_the_cpu_provider_lacks_kernels() -> None:
    """The offer's reason, checked against the installed ONNX Runtime."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from bakeoff.backends import onnxruntime as backend

    for op in ("MatMul", "Gemm", "Add", "Mul"):
        names = ["a", "b"]
        nodes = [
            helper.make_node("Cast", [n], [f"{n}_bf16"], to=TensorProto.BFLOAT16) for n in names
        ]
        nodes.append(helper.make_node(op, [f"{n}_bf16" for n in names], ["y_bf16"]))
        nodes.append(helper.make_node("Cast", ["y_bf16"], ["y"], to=TensorProto.FLOAT))
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in names],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 9
        with pytest.raises(Exception, match=f"NOT_IMPLEMENTED.*{op}"):
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert op in backend.BF16_REASON
    [offer] = backend.offers("bf16", "torch")
    assert offer.reason == backend.BF16_REASON


def test_torch_int4_linear_keeps_quality_and_lists_skipped_layers() -> None:
    import torch

    from bakeoff.backends.torch_eager import int4_weight_only

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x = torch.from_numpy(_x())
    with torch.no_grad():
        ref = net(x)
        quantized, settings = int4_weight_only(net, 32)
        out = quantized(x)
    assert type(quantized[0]).__name__ == "Int4WeightOnlyLinear"
    assert isinstance(quantized[2], torch.nn.Linear)  # 10 outputs: not packable
    assert settings["quantized_linear"] == 1 and settings["group_size"] == 32
    assert settings["float32_linear"] == {"2": "out_features 10 not a multiple of 16"}
    assert out.dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
    assert float(cos.min()) > 0.99
    with pytest.raises(RuntimeError, match="quantized no Linear layer"):
        int4_weight_only(torch.nn.Sequential(torch.nn.Linear(10, 10)), 32)


def test_offers_name_every_new_variant() -> None:
    from bakeoff.backends import onnxruntime, torch_compile, torch_eager

    ids = {
        o.variant.id: o.reason
        for backend in (onnxruntime, torch_eager, torch_compile)
        for p in ("fp16", "bf16", "int4")
        for o in backend.offers(p, "torch")
    }
    assert set(ids) == {
        "onnxruntime-fp16",
        "onnxruntime-bf16",
        "onnxruntime-int4-weight-only",
        "torch-fp16-autocast",
        "torch-bf16-autocast",
        "torch-int4-weight-only",
        "torch-compile-fp16-autocast",
        "torch-compile-bf16-autocast",
        "torch-compile-int4-weight-only",
    }


@pytest.mark.slow  # ~2 min on a shared 2-core machine; the unit tests above are fast
def test_fp16_bf16_int4_on_onnxruntime_and_torch(tmp_path: Path, store_path: Path) -> None:
    import onnx

    from bakeoff.hardware import emulation_note

    wl = _workload(tmp_path, ["onnxruntime", "torch"], ["fp16", "bf16", "int4"], [1])
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=2))
    cands = {c["id"]: c for c in result.document["candidates"]}
    assert set(cands) == {
        "onnxruntime-fp16-b1",
        "onnxruntime-bf16-b1",
        "onnxruntime-int4-weight-only-b1",
        "torch-fp16-autocast-b1",
        "torch-bf16-autocast-b1",
        "torch-int4-weight-only-b1",
    }
    for cid, c in cands.items():
        if c["status"] in ("ok", "rejected"):
            assert c["quality"]["metric"] == "cosine", cid
            assert c["latency_ms"]["p50"] > 0, cid
        else:
            assert c["status"] in ("unavailable", "failed"), cid
            assert len(c["reason"]) > 20, (cid, c["reason"])
    assert cands["onnxruntime-bf16-b1"]["status"] == "unavailable"
    assert "no bfloat16 kernels" in cands["onnxruntime-bf16-b1"]["reason"]

    # Built and quality-checked on every CPU; where the CPU emulates the precision,
    # the candidate carries a note that says so.
    needs = {
        "onnxruntime-int4-weight-only-b1": None,
        "onnxruntime-fp16-b1": "fp16",
        "torch-fp16-autocast-b1": "fp16",
        "torch-bf16-autocast-b1": "bf16",
        "torch-int4-weight-only-b1": "bf16",  # its kernel takes bf16 activations
    }
    for cid, precision in needs.items():
        note = emulation_note(precision) if precision else None
        assert cands[cid]["status"] in ("ok", "rejected"), (cid, cands[cid]["reason"])
        assert (note is None) == (not cands[cid]["notes"]), (cid, cands[cid]["notes"])
        if note:
            assert note in cands[cid]["notes"][0], cid
        q = cands[cid]["settings"]["quantization"]
        if cid.startswith("torch") and precision and cid.endswith("autocast-b1"):
            dtype = {"fp16": "float16", "bf16": "bfloat16"}[precision]
            assert q["method"] == "autocast" and q["dtype"] == dtype
            assert isinstance(q["onednn_native"], bool)
        elif cid == "torch-int4-weight-only-b1":
            assert q["group_size"] == 32 and q["quantized_linear"] == 1
            assert cands[cid]["quality"]["drop"] < 0.01
        elif cid == "onnxruntime-int4-weight-only-b1":
            assert q["method"] == "weight-only" and q["block_size"] == 32 and q["symmetric"]
            assert cands[cid]["quality"]["drop"] < 0.01
        else:  # onnxruntime-fp16: float32 I/O around a graph that really holds float16
            assert q["keep_io_types"] is True and q["float16_initializers"] > 0
            assert cands[cid]["quality"]["drop"] < 1e-3
            artifacts = store_path.parent / "runs" / result.document["run_id"] / "artifacts"
            graph = onnx.load(str(artifacts / "ort-fp16" / "model.onnx")).graph
            assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in graph.initializer)


@pytest.mark.slow  # inductor compiles the autocast graph on the first call (~20 s here)
def test_torch_compile_bf16_autocast(tmp_path: Path, store_path: Path) -> None:
    from bakeoff.hardware import emulation_note

    wl = _workload(tmp_path, ["torch-compile"], ["bf16"], [1])
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=1))
    [c] = result.document["candidates"]
    assert c["id"] == "torch-compile-bf16-autocast-b1"
    assert c["notes"] == ([emulation_note("bf16")] if emulation_note("bf16") else [])
    assert c["status"] in ("ok", "rejected"), c["reason"]
    assert c["quality"]["drop"] < 1e-3
    assert c["settings"]["compile_backend"] == "inductor"
    assert c["settings"]["quantization"]["dtype"] == "bfloat16"
    assert c["cold_start_s"]["first_call"] > 0


# slow: cache hygiene, 40-60 s of torch.compile; torch-compile itself runs in make test elsewhere
# (make test stays within its 12 minutes on 2 cores)
@pytest.mark.slow
def test_torch_compile_workers_compile_in_private_caches_they_remove(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each timed worker compiles from an empty inductor cache of its own, so the
    first call is the cold compile a fresh deployment pays (and repeated cold
    starts are independent); the shared cache is neither read nor written."""
    import os
    import tempfile

    shared = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])  # set for every test (conftest)

    def contents() -> set[Path]:
        return set(shared.rglob("*")) if shared.exists() else set()

    before = contents()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    wl = _workload(tmp_path, ["torch-compile"], ["fp32"], [1])
    opts = api.RunOptions(quick=True, store=store_path, budget_s=1)
    doc = api.run(str(wl), opts).document
    [c] = doc["candidates"]
    assert c["status"] == "ok", c["reason"]
    assert c["settings"]["compile_backend"] == "inductor"
    # Loaded beside the builds (on more than one core), it compiled in its own
    # process alone; loaded in its turn, with inductor's default (one per core).
    from torch._inductor import config

    beside = c["id"] in doc["variant_cache"]["loaded_beside_builds"]
    assert c["settings"]["compile_threads"] == (1 if beside else config.compile_threads)
    assert contents() == before
    assert list((tmp_path / "tmp").iterdir()) == []  # every worker's cache removed


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_torch_autocast_variants_report_the_size_of_their_weights(precision: str) -> None:
    """Autocast keeps the FP32 weights, so a BF16/FP16 candidate weighs what FP32 does
    (its size used to show as unknown: the autocast call hid the module)."""
    import torch

    from bakeoff.backends.torch_eager import TorchRunner, with_autocast
    from bakeoff.sizes import model_bytes, torch_module_bytes

    module = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    runner = TorchRunner(with_autocast(module, precision), {})
    assert model_bytes(runner, {}) == torch_module_bytes(module)


def _opset12_conv(path: Path) -> Path:
    """A Conv at opset 12, as Paddle's exporter writes PaddleOCR's detector: per-channel
    weights need DequantizeLinear's `axis`, which opset 12 does not have."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_static_int8_graph_its_runtime_refuses_is_rebuilt_per_tensor_and_loads(
    tmp_path: Path,
) -> None:
    from bakeoff.transforms.onnx_check import written_problem
    from bakeoff.transforms.ort_quantize import static_int8

    source = _opset12_conv(tmp_path / "conv.onnx")
    calib = {"x": np.random.default_rng(0).random((16, 3, 8, 8), np.float32)}
    out = tmp_path / "int8"
    out.mkdir()
    built = static_int8(str(source), out, calib)
    settings = built["quantization"]
    assert settings["per_channel"] is False
    assert "Unrecognized attribute: axis for operator DequantizeLinear" in settings["retried"]
    assert written_problem(built["path"], source) is None
    y = _session(Path(built["path"])).run(None, {"x": calib["x"][:2]})[0]  # type: ignore[attr-defined]
    assert y.shape == (2, 4, 8, 8)


def test_a_written_file_that_does_not_load_is_named_with_the_checkers_words(
    tmp_path: Path,
) -> None:
    from bakeoff.transforms.onnx_check import written_problem

    source = _opset12_conv(tmp_path / "conv.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(source.read_bytes()[:-40])
    problem = written_problem(broken, source)
    assert problem is not None and problem.startswith("onnx.checker:")


def test_the_int8_quantizers_write_nothing_beside_the_shared_fp32_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dynamic and the static INT8 builds run side by side from one FP32 file:
    given its path, ONNX Runtime wrote `model-inferred.onnx` beside it and deleted it,
    so the one build deleted the other's (FileNotFoundError on Resemblyzer's LSTM).
    Every shape-inference file either writes is in a folder of its own now."""
    import onnx.shape_inference

    from bakeoff.transforms.ort_quantize import dynamic_int8, static_int8

    source = _tiny_onnx(tmp_path)
    written: list[Path] = []
    infer = onnx.shape_inference.infer_shapes_path

    def spy(model_path: str, output_path: str = "", *args: object, **kwargs: object) -> None:
        written.append(Path(output_path or model_path))
        infer(model_path, output_path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes_path", spy)
    for name in ("dynamic", "static"):
        (tmp_path / name).mkdir()
    dynamic_int8(str(source), tmp_path / "dynamic")
    static_int8(str(source), tmp_path / "static", {"x": _x(16)})
    assert written, "the quantizers infer shapes through a file"
    assert all(p.parent != source.parent for p in written), written


@pytest.mark.parametrize(
    ("flags", "seven_bit"),
    [
        ("avx2,fma", True),  # U8S8 through 16-bit multiply-adds: 8-bit weights may saturate
        ("", True),
        ("avx2,avx512f,avx512_vnni", False),
        ("avx2,avx_vnni", False),
        ("avx2,avx512f,amx_int8,avx512_vnni", False),
    ],
)
def test_dynamic_int8_takes_7_bit_weights_on_x86_without_vnni(
    flags: str, seven_bit: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import onnx

    from bakeoff.transforms.ort_quantize import dynamic_int8, reduce_range_here

    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", flags)
    assert reduce_range_here() is seven_bit
    if not seven_bit:
        return
    src = mlp_onnx(tmp_path / "mlp.onnx", (8, 16, 4))
    out = tmp_path / "int8"
    out.mkdir()
    built = dynamic_int8(str(src), out, reduce_range=True)
    assert built["quantization"]["reduce_range"] is True
    assert onnx.load(built["path"]).graph.node  # a model ONNX Runtime wrote
