"""How close to the limit (issue 19): FLOPs counted in exported ONNX graphs against
hand-computed values, this machine's GEMM peak, and the fraction between them.

The peak tests branch on the CPU's flags (or simulate them with BAKEOFF_CPU_FLAGS),
so they pass on AVX2-only, AVX-512 VNNI and AMX CPUs alike; they assert no timing
beyond "positive"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from bakeoff import efficiency, flops, hardware
from bakeoff.trials.launcher import worker_env

# ---------------------------------------------------------------- FLOPs from the graph


def _export(model: Any, example: Any, path: Path, *, dynamo: bool = True) -> Path:
    """As bakeoff exports (transforms/onnx_export.py): opset 18, a dynamic batch axis."""
    import torch

    model.eval()
    if dynamo:
        program = torch.onnx.export(
            model,
            (example,),
            input_names=["input"],
            output_names=["output"],
            opset_version=18,
            dynamo=True,
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            external_data=False,
            verbose=False,
        )
        assert program is not None
        program.save(str(path))
    else:
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["input"],
            output_names=["output"],
            opset_version=18,
            dynamo=False,
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    return path


def test_the_flops_of_a_small_mlp(tmp_path: Path) -> None:
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
            )

        def forward(self, x: Any) -> Any:
            return self.net(x)

    path = _export(Mlp(), torch.zeros(2, 64), tmp_path / "mlp.onnx")
    # Two GEMMs per sample, 2*K*N each; bias adds and ReLU are not GEMM work.
    expected = 2 * (64 * 32 + 32 * 10)
    assert flops.flops_per_sample(path) == expected
    # The same count per sample from a batch of 8, however the batch is given.
    assert flops.flops_per_sample(path, batch_size=8) == expected
    assert flops.flops_per_sample(path, {"input": [8, 64]}, batch_size=8) == expected


def test_the_flops_of_a_small_cnn(tmp_path: Path) -> None:
    import torch

    class Cnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)  # 1x8x8 -> 4x8x8
            self.conv2 = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)  # -> 8x4x4
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.conv1(x))
            x = torch.relu(self.conv2(x))
            return self.fc(x.flatten(1))

    # Conv: 2*Cout*Hout*Wout*(Cin/groups)*kh*kw; Linear: 2*K*N.
    conv1 = 2 * 4 * 8 * 8 * (1 // 1) * 3 * 3
    conv2 = 2 * 8 * 4 * 4 * (4 // 2) * 3 * 3
    fc = 2 * 128 * 10
    expected = conv1 + conv2 + fc
    assert expected == 11776
    example = torch.zeros(2, 1, 8, 8)
    # Both of bakeoff's exporters: the dynamo one and its TorchScript fallback.
    for dynamo in (True, False):
        path = _export(Cnn(), example, tmp_path / f"cnn-{dynamo}.onnx", dynamo=dynamo)
        assert flops.flops_per_sample(path, batch_size=4) == expected, dynamo


def test_attention_counts_as_its_matmuls(tmp_path: Path) -> None:
    """torch's exporter writes scaled_dot_product_attention out at opset 18: Q·Kᵀ and
    the weights times V are MatMuls like the projections."""
    import torch

    length, width, heads = 6, 8, 2

    class SelfAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(width, 3 * width, bias=False)

        def forward(self, x: Any) -> Any:
            b = x.shape[0]
            q, k, v = self.qkv(x).reshape(b, length, 3, heads, width // heads).unbind(2)
            y = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
            return y.transpose(1, 2).reshape(b, length, width)

    path = _export(SelfAttention(), torch.zeros(2, length, width), tmp_path / "attn.onnx")
    projections = 2 * length * width * 3 * width
    scores = 2 * heads * length * length * (width // heads)  # Q·Kᵀ
    weighted = 2 * heads * length * length * (width // heads)  # softmax(...)·V
    assert flops.flops_per_sample(path) == projections + scores + weighted


def test_a_batch_taken_through_constant_of_shape(tmp_path: Path) -> None:
    """The TorchScript exporter writes the shape of BERT's buffered token_type_ids
    (`expand(batch, length)`) as a Where over a ConstantOfShape, which onnxscript's
    folder keeps by default: every tensor after it had an unknown batch, and MiniLM,
    the default workload, had no count. Small fills are folded now."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    constants = [
        helper.make_tensor("rank", i64, [1], [2]),
        helper.make_tensor("minus_one", i64, [], [-1]),
        helper.make_tensor("buffer", f32, [1, 4], [1.0, 2.0, 3.0, 4.0]),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node(
            "ConstantOfShape", ["rank"], ["ones"], value=helper.make_tensor("v", i64, [1], [1])
        ),
        helper.make_node("Mul", ["ones", "minus_one"], ["unset"]),
        helper.make_node("Equal", ["shape", "unset"], ["is_unset"]),
        helper.make_node("Where", ["is_unset", "ones", "shape"], ["target"]),
        helper.make_node("Expand", ["buffer", "target"], ["expanded"]),
        helper.make_node("MatMul", ["expanded", "w"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", f32, ["batch", 4])
    w = helper.make_tensor_value_info("w", f32, [4, 3])  # an input: nothing folds it away
    graph = helper.make_graph(
        nodes, "g", [x, w], [helper.make_tensor_value_info("y", f32, None)], constants
    )
    path = tmp_path / "fill.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    shapes = {"x": [2, 4], "w": [4, 3]}
    assert flops.flops_per_sample(path, shapes, batch_size=2) == 2 * 4 * 3


def _onnx_file(path: Path, nodes: list[Any], inputs: list[Any], opset: int = 18) -> Path:
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, str(path))
    return path


def test_gemm_einsum_and_the_onnx_attention_operator(tmp_path: Path) -> None:
    """Operators torch's export at opset 18 does not write, in graphs made by hand."""
    f32 = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f32, ["batch", 16])
    w = helper.make_tensor_value_info("w", f32, [8, 16])
    gemm = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
    assert flops.flops_per_sample(_onnx_file(tmp_path / "g.onnx", [gemm], [x, w])) == (2 * 16 * 8)
    # An Einsum with a contraction: 2 per point of its joint index space.
    a = helper.make_tensor_value_info("a", f32, ["batch", 5, 7])
    b = helper.make_tensor_value_info("b", f32, [7, 3])
    einsum = helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,jk->...ik")
    path = _onnx_file(tmp_path / "e.onnx", [einsum], [a, b])
    assert flops.flops_per_sample(path) == 2 * 5 * 7 * 3
    # ONNX's Attention (opset 23): 4-D [B, H, L, D], 3 query and 4 key positions.
    q = helper.make_tensor_value_info("q", f32, ["batch", 2, 3, 4])
    k = helper.make_tensor_value_info("k", f32, ["batch", 2, 4, 4])
    v = helper.make_tensor_value_info("v", f32, ["batch", 2, 4, 5])
    attention = helper.make_node("Attention", ["q", "k", "v"], ["y"])
    path = _onnx_file(tmp_path / "a.onnx", [attention], [q, k, v], opset=23)
    assert flops.flops_per_sample(path) == 2 * 2 * 3 * 4 * (4 + 5)


def test_no_count_rather_than_a_wrong_one(tmp_path: Path) -> None:
    f32 = TensorProto.FLOAT
    w = helper.make_tensor_value_info("w", f32, [16, 8])
    matmul = helper.make_node("MatMul", ["x", "w"], ["y"])
    # A sequence axis of unknown length: counted only when the call's shapes are given.
    x = helper.make_tensor_value_info("x", f32, ["batch", "length", 16])
    path = _onnx_file(tmp_path / "seq.onnx", [matmul], [x, w])
    assert flops.flops_per_sample(path) is None
    shapes = {"x": [2, 10, 16], "w": [16, 8]}
    assert flops.flops_per_sample(path, shapes, batch_size=2) == 2 * 10 * 16 * 8
    # No GEMM work at all: a GEMM peak says nothing about it.
    relu = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", f32, ["batch", 16])
    assert flops.flops_per_sample(_onnx_file(tmp_path / "r.onnx", [relu], [x])) is None
    # A file that is not ONNX: no count, and no error for the run.
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert flops.flops_per_sample(tmp_path / "bad.onnx") is None


# ---------------------------------------------------------------- the fraction


def test_efficiency_arithmetic() -> None:
    # 1 MFLOP per sample at 2000 samples/s is 2 GFLOP/s: 2% of a 100 GFLOP/s peak.
    assert efficiency.efficiency(1_000_000, 2000.0, 100.0) == {
        "flops_per_sample": 1_000_000,
        "achieved_gflops": 2.0,
        "peak_gflops": 100.0,
        "fraction": 0.02,
    }
    # A tiny model keeps its significant figures instead of rounding to zero.
    tiny = efficiency.efficiency(4736, 1000.0, 98.0)
    assert tiny["achieved_gflops"] == 0.004736
    assert tiny["fraction"] == pytest.approx(4.833e-05)
    with pytest.raises(ValueError):
        efficiency.efficiency(4736, 1000.0, 0.0)
    # Each precision against its own peak where measured, else fp32's where that fits.
    peaks = {"fp32": {"gflops": 100.0}, "int8": {"gflops": None, "why": "AVX2 only"}}
    assert efficiency.peak_for(peaks, "bf16") == 100.0
    assert efficiency.peak_for(peaks, "int8") is None
    assert efficiency.peak_for(peaks, "int4") is None
    assert efficiency.peak_for(None, "fp32") is None
    assert efficiency.candidate_efficiency(None, 2000.0, peaks, "fp32") is None
    assert efficiency.candidate_efficiency(10**6, None, peaks, "fp32") is None
    assert efficiency.candidate_efficiency(10**6, 2000.0, peaks, "int8") is None
    assert efficiency.candidate_efficiency(10**6, 2000.0, peaks, "fp32") == (
        efficiency.efficiency(10**6, 2000.0, 100.0)
    )
    assert [efficiency.percent(f) for f in (0.123, 0.034, 0.0012, 1.05)] == [
        "12%",
        "3.4%",
        "0.12%",
        "105%",
    ]


# ---------------------------------------------------------------- the peak


@pytest.mark.usefixtures("gemm_peak")
def test_the_peak_on_this_cpu() -> None:
    """FP32 always; INT8 measured where the CPU has VNNI or AMX-INT8, else the reason."""
    peaks = efficiency.measure_peak(1, ["fp32", "int8"], worker_env(1), size=256)
    assert peaks["fp32"]["gflops"] > 0
    assert "torch.matmul 256x256 fp32, 1 thread," in peaks["fp32"]["how"]
    if hardware.int8_path() in ("amx", "vnni"):
        assert peaks["int8"]["gflops"] > 0, peaks["int8"]
        assert "int8" in peaks["int8"]["how"]
    else:
        assert peaks["int8"]["gflops"] is None
        assert peaks["int8"]["why"]
    assert "bf16" not in peaks  # not asked for


@pytest.mark.usefixtures("gemm_peak")
def test_no_int8_peak_without_an_int8_dot_product(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hardware.FLAGS_VARIABLE, "avx2")
    peaks = efficiency.measure_peak(1, ["int8", "bf16"], size=128)
    assert peaks["fp32"]["gflops"] > 0  # the fallback peak, measured whatever is asked
    assert peaks["int8"]["gflops"] is None
    assert "AVX2" in peaks["int8"]["why"]
    assert peaks["bf16"]["gflops"] is None
    assert "fp32 peak" in peaks["bf16"]["why"]


def test_the_reports_show_the_fraction_and_old_documents_do_not_change() -> None:
    from rich.console import Console

    from bakeoff.report.terminal import results_table

    def rendered(candidate: dict[str, Any]) -> str:
        doc = {"run_id": "r", "workload": {"name": "w"}, "verdicts": [], "candidates": []}
        doc["candidates"] = [candidate]
        console = Console(width=250, record=True)
        console.print(results_table(doc))
        return console.export_text()

    old: dict[str, Any] = {
        "id": "onnxruntime-fp32-b1",
        "status": "ok",
        "validity": "valid",
        "quality": None,
        "latency_ms": None,
        "throughput": {"samples_per_s": 2000.0, "ci95": [1990.0, 2010.0]},
        "peak_rss_mb": 100.0,
        "model_size_mb": 1.0,
        "cold_start_s": {"load": 0.1, "first_call": 0.01},
    }
    assert "% of peak" not in rendered(old)
    new = {**old, "efficiency": efficiency.efficiency(1_000_000, 2000.0, 100.0)}
    assert "% of peak" in rendered(new) and " 2% " in rendered(new)
    assert "% of peak" in rendered({**old, "efficiency": None})


def test_the_html_report_shows_the_peaks_and_old_documents_do_not_change() -> None:
    import copy
    import json

    from bakeoff.report.data import StoredRun
    from bakeoff.report.html import render

    # `bakeoff run builtin:digits --quick`, saved before issue 19.
    old = json.loads(
        (Path(__file__).parent / "fixtures" / "digits_quick_document.json").read_text()
    )

    def page(doc: dict[str, Any]) -> str:
        record = {"run_id": doc["run_id"], "status": "done", "document": doc, "created_at": 0}
        return render(StoredRun({**record, "environment": doc["environment"], "settings": {}}))

    before = page(old)
    assert "GEMM peak" not in before
    new = copy.deepcopy(old)
    peaks = {
        "fp32": {"gflops": 184.8, "how": "torch.matmul 2048x2048 fp32, 2 threads, best of 6"},
        "int8": {"gflops": None, "why": "no int8 dot-product instructions"},
    }
    new["environment"]["peak_gflops"] = peaks
    new["candidates"][0]["efficiency"] = efficiency.efficiency(675072, 20000.0, 184.8)
    after = page(new)
    assert "% of GEMM peak" in after
    assert "7.3%" in after and "675,072 FLOPs per sample" in after
    assert "fp32: 185 GFLOP/s (torch.matmul 2048x2048 fp32, 2 threads, best of 6)" in after
    assert "int8: not measured (no int8 dot-product instructions)" in after


def test_the_peak_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """BAKEOFF_GEMM_PEAK=off: no GEMM is run, and every precision says why it has no figure."""
    monkeypatch.setenv("BAKEOFF_GEMM_PEAK", "off")
    probe = efficiency.PeakProbe(2, {"fp32", "int8", "bf16"})
    assert probe.proc is None  # nothing started
    peaks = probe.measure()
    assert peaks["fp32"] == {"gflops": None, "why": "not measured: BAKEOFF_GEMM_PEAK=off"}
    assert all(p["gflops"] is None for p in peaks.values())
    probe.close()
