"""Inputs not batched on axis 0: a recurrent state [layers, batch, hidden] and a 0-d
sample rate fed the same to every call (a Silero-VAD-like stateful speech model).

`[data] batch_axes` and `constants` must reach every place that cuts samples (the
split, timing batches, calibration, quality) and every exporter; without them the
workload is refused with a message that names each input and the keys that fix it.
"""

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
from bakeoff.batching import Layout, layout_in, read_split, split_names
from bakeoff.errors import UserError
from bakeoff.inference.split import split_data
from bakeoff.loader import load_workload

LAYERS, HIDDEN, SAMPLES = 2, 16, 32

# A recurrent step like Silero VAD's: one window of audio, the state carried from the
# previous call (batch on axis 1, as torch's RNNs keep it) and the sample rate.
# Features are reductions over the window, so its length may vary (variable_axes).
# The first output, the per-window scores, is batch-first as bakeoff's gate expects.
STATEFUL_MODEL = textwrap.dedent(
    f"""
    import numpy as np
    import torch

    LAYERS, HIDDEN, SAMPLES = {LAYERS}, {HIDDEN}, {SAMPLES}


    class StatefulStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.frontend = torch.nn.Linear(4, HIDDEN)
            self.cells = torch.nn.ModuleList(
                torch.nn.GRUCell(HIDDEN, HIDDEN) for _ in range(LAYERS)
            )
            self.head = torch.nn.Linear(HIDDEN, 4)

        def forward(self, input, state, sr):
            # the sample rate scales the window: fed wrongly, every output moves
            x = input * (sr.to(input.dtype) / 8000.0)
            feats = torch.stack([x.mean(1), x.abs().mean(1), x.amax(1), x.amin(1)], dim=1)
            h = torch.tanh(self.frontend(feats))
            new_state = []
            for layer, cell in enumerate(self.cells):
                h = cell(h, state[layer])
                new_state.append(h)
            return self.head(h), torch.stack(new_state)


    def build():
        torch.manual_seed(0)
        return StatefulStep().eval()


    def inputs(n=48):
        rng = np.random.default_rng(0)
        return {{
            "input": rng.standard_normal((n, SAMPLES)).astype(np.float32),
            "state": rng.standard_normal((LAYERS, n, HIDDEN)).astype(np.float32),
            "sr": np.array(16000, dtype=np.int64),
        }}


    def mismatched():
        # the number of samples (300) is on axis 1 of state only
        rng = np.random.default_rng(0)
        return {{
            "input": rng.standard_normal((300, 512)).astype(np.float32),
            "state": np.zeros((2, 300, 128), np.float32),
            "sr": np.array(16000, dtype=np.int64),
        }}
    """
)

# The hand-written candidates reach every path that slices samples: torch eager
# (the reference), the ONNX export with ORT static INT8 calibration, the ONNX -> IR
# conversion with NNCF INT8 calibration, and OpenVINO's direct torch conversion.
CANDIDATES = """
[[candidates]]
label = "torch"
runtime = "torch"
[[candidates]]
label = "ort"
runtime = "onnxruntime"
[[candidates]]
label = "ort-int8-static"
runtime = "onnxruntime"
precision = "int8"
method = "static"
[[candidates]]
label = "ov-direct"
runtime = "openvino"
method = "direct"
[[candidates]]
label = "ov-int8-nncf"
runtime = "openvino"
precision = "int8"
method = "nncf"
"""


def _stateful_workload(tmp_path: Path, data: str, factory: str = "inputs") -> Path:
    (tmp_path / "stateful_vad.py").write_text(STATEFUL_MODEL)
    path = tmp_path / "workload.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "stateful-vad"
            [model]
            kind = "torch"
            factory = "stateful_vad:build"
            [data]
            factory = "stateful_vad:{factory}"
            """
        )
        + textwrap.dedent(data)
        # INT8 on a 2-layer GRU fed random audio loses a few % cosine: the gate
        # is set for that; FP32 variants are held to far less below.
        + "[quality]\nmax_drop = 0.1\n"
        + CANDIDATES
    )
    return path


STATEFUL_DATA = """
batch_axes = { state = 1 }
constants = ["sr"]
variable_axes = { input = [1] }
"""


# slow: the longest batch-axes run; the split, the refusals and the exporters keep their fast
# tests (make test stays within its 12 minutes on 2 cores)
@pytest.mark.slow
def test_a_stateful_model_runs_end_to_end_at_batch_1_and_8(
    tmp_path: Path, store_path: Path
) -> None:
    import onnx
    import onnxruntime as ort
    import openvino as ov
    import torch

    wl = _stateful_workload(tmp_path, STATEFUL_DATA)
    opts = api.RunOptions(
        quick=True,
        batch_sizes=[1, 8],
        runtimes=["torch", "onnxruntime", "openvino"],
        precisions=["fp32", "int8"],
        store=store_path,
        budget_s=2,
    )
    doc = api.run(str(wl), opts).document
    assert doc["workload"]["batch_axes"] == {"state": 1}
    assert doc["workload"]["constants"] == ["sr"]
    assert doc["workload"]["samples"] == 48
    from bakeoff.report.data import load
    from bakeoff.report.html import render

    page = render(load(doc["run_id"], store_path))
    assert "<dt>batch axes (not 0)</dt><dd>{&#x27;state&#x27;: 1}</dd>" in page
    assert "<dt>constant inputs</dt><dd>sr</dd>" in page
    cands = {c["id"]: c for c in doc["candidates"]}
    assert len(cands) == 10, sorted(cands)
    for c in cands.values():
        assert c["status"] == "ok", (c["id"], c["reason"])
        drop, alt = c["quality"]["drop"], c["quality_second_shape"]["drop"]
        limit = 1e-5 if c["precision"] == "fp32" else c["quality"]["max_drop"]
        assert drop <= limit and alt <= limit, (c["id"], drop, alt)

    artifacts = next(store_path.parent.glob("runs/*/artifacts"))
    # the ONNX file: batch dynamic on axis 0 of input and axis 1 of state, sr a 0-d input
    onnx_file = artifacts / "onnx-fp32" / "model.onnx"
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in onnx.load(str(onnx_file)).graph.input
    }
    assert isinstance(dims["input"][0], str) and isinstance(dims["input"][1], str), dims
    assert dims["state"][0] == LAYERS and dims["state"][2] == HIDDEN, dims
    assert isinstance(dims["state"][1], str), dims
    assert dims["sr"] == [], dims
    # OpenVINO's direct conversion: the same axes dynamic, the constant static
    ir = ov.Core().read_model(str(artifacts / "ov-fp32-direct" / "model.xml"))
    shapes = {p.get_any_name(): str(p.get_partial_shape()) for p in ir.inputs}
    assert shapes == {"input": "[?,?]", "state": "[2,?,16]", "sr": "[]"}, shapes

    # sr is a live input of the exported graph, not a value folded in at export
    sys.path.insert(0, str(tmp_path))
    try:
        import stateful_vad
    finally:
        sys.path.remove(str(tmp_path))
    batch = LAYOUT.contiguous(LAYOUT.cut(stateful_vad.inputs(), 0, 3))
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    outs = []
    for sr in (16000, 8000):
        feed = {**batch, "sr": np.array(sr, dtype=np.int64)}
        got = session.run(None, feed)[0]
        with torch.no_grad():
            want = stateful_vad.build()(*(torch.from_numpy(v) for v in feed.values()))[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        outs.append(got)
    assert not np.allclose(outs[0], outs[1])

    # exported, both keep the batch where it is: the manifest says so, and a batch
    # of 3 (neither batch size measured) runs
    from bakeoff import export

    for cand in ("torch-b8", "ort-b8"):
        out = tmp_path / f"export-{cand}"
        manifest = export.export(doc["run_id"], out, cand, store=store_path)
        assert manifest["inputs"] == [
            {"name": "input", "dtype": "float32", "shape": [8, SAMPLES], "batch_axis": 0},
            {"name": "state", "dtype": "float32", "shape": [2, 8, HIDDEN], "batch_axis": 1},
            {"name": "sr", "dtype": "int64", "shape": [], "batch_axis": None},
        ]
        np.testing.assert_allclose(export.load(out)(batch), outs[0], rtol=1e-4, atol=1e-5)


def test_without_batch_axes_the_cli_refuses_naming_each_input_and_the_keys(
    tmp_path: Path,
) -> None:
    wl = _stateful_workload(tmp_path, "", factory="mismatched")
    proc = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "run", str(wl), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "400"},
        stdin=subprocess.DEVNULL,
    )
    said = " ".join((proc.stderr + proc.stdout).split())
    assert proc.returncode == 2, said
    assert "arrays disagree on the number of samples along axis 0" in said, said
    assert "input (300, 512) has 300" in said, said
    assert "state (2, 300, 128) has 2" in said, said
    assert "sr () is 0-d" in said, said
    # the fix, with this data's own input and axis
    assert "set data.batch_axes (e.g. batch_axes = { state = 1 })" in said, said
    assert "list it in data.constants" in said, said
    assert not (tmp_path / ".bakeoff").exists()  # refused before any run was stored


# ---------------------------------------------------------------- the slicing helper


def _arrays(n: int = 6) -> dict[str, np.ndarray]:
    """Sample i holds the value i in every batched input, so a cut can be read back."""
    return {
        "input": np.repeat(np.arange(n, dtype=np.float32)[:, None], 5, axis=1),
        "state": np.broadcast_to(np.arange(n, dtype=np.float32)[None, :, None], (2, n, 3)).copy(),
        "sr": np.array(16000, dtype=np.int64),
    }


LAYOUT = Layout({"state": 1}, ("sr",))


def test_layout_takes_samples_along_each_batch_axis_and_keeps_constants() -> None:
    arrays = _arrays()
    assert LAYOUT.count(arrays) == 6
    assert LAYOUT.axis("input") == 0 and LAYOUT.axis("state") == 1 and LAYOUT.axis("sr") is None
    picked = LAYOUT.take(arrays, [4, 1])
    assert list(picked) == ["input", "state", "sr"]  # the feeding order is kept
    assert picked["input"].shape == (2, 5) and picked["input"][:, 0].tolist() == [4, 1]
    assert picked["state"].shape == (2, 2, 3) and picked["state"][1, :, 0].tolist() == [4, 1]
    assert picked["sr"].shape == () and int(picked["sr"]) == 16000
    cut = LAYOUT.cut(arrays, 2, 5)
    assert cut["state"].shape == (2, 3, 3) and cut["state"][0, :, 2].tolist() == [2, 3, 4]
    samples = LAYOUT.samples(arrays)
    assert len(samples) == 6
    assert [s["state"].shape for s in samples[:1]] == [(2, 1, 3)]
    assert all(s["sr"].shape == () for s in samples)


def test_layout_shapes_and_contiguous_copies_keep_a_0d_constant_0d() -> None:
    arrays = _arrays()
    assert LAYOUT.batch_shape("state", (2, 6, 3), 8) == (2, 8, 3)
    assert LAYOUT.batch_shape("sr", (), 8) == ()
    assert LAYOUT.sample_shape("state", (2, 6, 3)) == (2, 3)
    assert LAYOUT.sample_shape("input", (6, 5)) == (5,)
    batch = LAYOUT.contiguous(LAYOUT.cut(arrays, 0, 2))
    assert batch["state"].flags["C_CONTIGUOUS"] and batch["sr"].shape == ()
    with pytest.raises(ValueError, match="no batched input"):
        Layout({}, ("sr",)).count({"sr": arrays["sr"]})


def test_the_data_file_records_its_layout(tmp_path: Path) -> None:
    arrays = _arrays()
    extra = LAYOUT.npz_keys(arrays)
    assert set(extra) == {"const/sr", "batch_axis/state"}
    split = {"pool/input": arrays["input"], "const/sr": arrays["sr"], **extra}
    split["pool/state"] = arrays["state"]
    np.savez(tmp_path / "data.npz", **split)  # type: ignore[arg-type]
    got, layout = read_split(tmp_path / "data.npz", "pool", ["input", "state", "sr"])
    assert layout == LAYOUT
    assert got["state"].shape == (2, 6, 3) and got["sr"].shape == ()
    with np.load(tmp_path / "data.npz") as z:
        assert split_names(z.files, "pool") == ["input", "sr", "state"]
    # a workload with every input on axis 0 and no constants adds no keys
    assert Layout().npz_keys({"input": arrays["input"]}) == {}
    assert layout_in({"pool/input": arrays["input"]}) == Layout()


def test_the_split_cuts_each_input_on_its_batch_axis(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", **_arrays(40))  # type: ignore[arg-type]
    (tmp_path / "w.toml").write_text(
        'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n'
        "batch_axes = { state = 1 }\nvariable_axes = { input = [1] }\n"
    )
    workload = load_workload(str(tmp_path / "w.toml"))
    assert workload.source.batch_axes == {"state": 1}
    assert workload.source.constants == ["sr"]  # 0-d: a constant without being listed
    assert workload.n_samples == 40
    split = split_data(workload, quick=True)
    assert "quality/sr" not in split and int(split["const/sr"]) == 16000
    assert int(split["batch_axis/state"]) == 1
    quality, pool = split["quality/input"][:, 0], split["pool/input"][:, 0]
    # the same samples in every input, in the same order
    assert split["quality/state"][1, :, 2].tolist() == quality.tolist()
    assert split["pool/state"][0, :, 0].tolist() == pool.tolist()
    assert split["calib/state"].shape == (2, len(split["calib/input"]), 3)
    assert sorted(quality.tolist() + pool.tolist()) == list(range(40))
    # the second shape halves input's variable axis and leaves state as it is
    assert split["quality_alt/input"].shape == (len(quality), 2)
    assert split["quality_alt/state"].shape == split["quality/state"].shape
    assert "quality_alt/sr" not in split


# ---------------------------------------------------------------- spec validation


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("batch_axes = { hidden = 1 }", "data.batch_axes: no input named 'hidden'"),
        ("batch_axes = { state = 3 }", "data.batch_axes.state: axis 3 does not exist"),
        ("batch_axes = { state = 1, sr = 0 }", "data.batch_axes.sr: axis 0 does not exist"),
        ('batch_axes = { state = 1 }\nconstants = ["rate"]', "data.constants: no input named"),
        (
            'batch_axes = { state = 1 }\nconstants = ["state"]',
            "'state' is in data.batch_axes too",
        ),
        ('constants = ["input", "state"]', "every input is a constant"),
        (
            "batch_axes = { state = 1 }\nvariable_axes = { state = [1] }",
            "data.variable_axes.state: axis 1 is state's batch axis",
        ),
        (
            "batch_axes = { state = 1 }\nvariable_axes = { sr = [0] }",
            "data.variable_axes.sr: sr is a constant",
        ),
        ("batch_axes = { state = -1 }", "greater than or equal to 0"),
    ],
)
def test_batch_axes_and_constants_errors_name_the_key(
    tmp_path: Path, keys: str, expected: str
) -> None:
    np.savez(tmp_path / "d.npz", **_arrays(8))  # type: ignore[arg-type]
    (tmp_path / "w.toml").write_text(
        f'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n{keys}\n'
    )
    with pytest.raises(UserError) as info:
        load_workload(str(tmp_path / "w.toml"))
    assert expected in str(info.value), str(info.value)
    assert str(tmp_path / "w.toml") in str(info.value)


def test_a_variable_axis_0_is_allowed_where_the_batch_is_elsewhere(tmp_path: Path) -> None:
    # a time-major sequence [steps, batch, features]: the steps (axis 0) vary
    np.savez(tmp_path / "d.npz", frames=np.zeros((5, 8, 3), np.float32))
    (tmp_path / "w.toml").write_text(
        'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n'
        "batch_axes = { frames = 1 }\nvariable_axes = { frames = [0] }\n"
    )
    workload = load_workload(str(tmp_path / "w.toml"))
    assert workload.n_samples == 8
    assert json.loads(json.dumps(workload.source.__dict__))["batch_axes"] == {"frames": 1}
