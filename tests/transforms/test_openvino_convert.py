"""OpenVINO's precisions on a tiny real MLP: FP16/BF16 hints read back, NNCF INT8
(plain and accuracy-aware), INT4 weight-only, direct torch -> IR conversion, and
an OpenVINO IR file as the model. Each test takes tens of seconds."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api
from bakeoff.judge.outputs import OutputGate, OutputRule
from bakeoff.transforms import StepNotNeeded
from tiny_ir import plain_int8_drop, tight_gate, write_mlp_ir
from tiny_mlp import TINY_MLP

MODEL_MODULE = TINY_MLP + textwrap.dedent(
    """
    @torch.library.custom_op("bakeofftest::wobble", mutates_args=())
    def wobble(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


    @wobble.register_fake
    def _(x):
        return torch.empty_like(x)


    class WithCustomOp(Mlp):
        def forward(self, x):
            return self.net(wobble(x))


    def build_custom_op():
        torch.manual_seed(0)
        return WithCustomOp()
    """
)


def _workload(
    tmp_path: Path, factory: str, runtimes: list[str], precisions: list[str], batch_sizes: list[int]
) -> Path:
    (tmp_path / "tiny_model.py").write_text(MODEL_MODULE)
    path = tmp_path / "workload.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "tiny"
            [model]
            kind = "torch"
            factory = "tiny_model:{factory}"
            [data]
            factory = "tiny_model:inputs"
            [quality]
            metric = "cosine"
            max_drop = 0.01
            [search]
            runtimes = {json.dumps(runtimes)}
            precisions = {json.dumps(precisions)}
            batch_sizes = {json.dumps(batch_sizes)}
            """
        )
    )
    return path


def _by_id(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["candidates"]}


def _measured_or_explained(c: dict) -> bool:
    """ok/rejected with a quality verdict, or unavailable/failed with a reason."""
    if c["status"] in ("ok", "rejected"):
        return c["quality"] is not None and c["quality"]["metric"] == "cosine"
    return c["status"] in ("unavailable", "failed") and len(c["reason"]) > 10


def test_fp16_bf16_int8_int4_variants(tmp_path: Path, store_path: Path) -> None:
    from bakeoff.hardware import native_flags

    wl = _workload(tmp_path, "build", ["openvino"], ["fp16", "bf16", "int8", "int4"], [1])
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=4))
    cands = _by_id(result.document)
    left_out = result.document["settings"]["left_out"]
    rows = {
        "openvino-fp16-b1",
        "openvino-bf16-b1",
        "openvino-int8-nncf-b1",
        "openvino-int4-weight-only-b1",
    }
    assert set(cands) - {"openvino-int8-nncf-aa-b1"} == rows
    for cid, c in cands.items():
        assert _measured_or_explained(c), (cid, c["status"], c["reason"])
    # The hints are read back from the compiled model where the CPU has the precision
    # natively; elsewhere OpenVINO would run another precision under the hint, and
    # the candidate says so instead of being measured under the wrong name.
    for precision, hint in (("fp16", "f16"), ("bf16", "bf16")):
        c = cands[f"openvino-{precision}-b1"]
        if not native_flags(precision):
            assert c["status"] == "unavailable"
            assert f"only on CPUs with native {precision}" in c["reason"]
        else:
            assert c["status"] in ("ok", "rejected"), c["reason"]
            assert c["settings"]["INFERENCE_PRECISION_HINT"] == hint
            assert c["settings"]["quantization"]["inference_precision_hint"] == hint
    # Plain INT8 loses 1e-3 (VNNI) to 8e-3 (AVX2 only) here: within max_drop 0.01,
    # accuracy control would add nothing. It is then no candidate row (nothing is
    # missing) but listed as left out, with the drop that made it unnecessary.
    plain = cands["openvino-int8-nncf-b1"]
    if "openvino-int8-nncf-aa" in left_out:
        assert "openvino-int8-nncf-aa-b1" not in cands
        why = left_out["openvino-int8-nncf-aa"]
        assert why.startswith("not needed: plain NNCF INT8 (openvino-int8-nncf) loses ")
        assert "within max_drop 0.01" in why
        assert plain["status"] == "ok", plain["reason"]
    else:  # a CPU where plain INT8 fails the gate on the calibration split
        assert cands["openvino-int8-nncf-aa-b1"]["status"] in ("ok", "rejected", "failed")
    assert not [c for c in cands.values() if c["reason"].startswith("not needed")]
    # The MLP's 64-wide layers are smaller than the 128 group: the fallback is
    # recorded, with the group size NNCF applied instead.
    int4 = cands["openvino-int4-weight-only-b1"]
    assert int4["status"] in ("ok", "rejected"), int4["reason"]
    q4 = int4["settings"]["quantization"]
    assert (q4["mode"], q4["group_size"]) == ("int4_asym", 128)
    assert q4["group_size_fallback"].startswith("adjust:")
    assert "channel size: 64" in q4["group_size_fallback"]
    assert q4["int4_group_sizes"] == [64] and q4["int4_weights"] >= 1
    assert isinstance(int4["settings"]["DYNAMIC_QUANTIZATION_GROUP_SIZE"], int)


# Slow (about 30 s on 2 cores): make test has OpenVINO's direct conversion, dynamic
# batch and quality-checked at two batch sizes, in tests/inference/test_split.py's stateful run.
@pytest.mark.slow
def test_direct_torch_conversion_matches_torch(tmp_path: Path, store_path: Path) -> None:
    wl = _workload(tmp_path, "build", ["openvino"], ["fp32"], [1, 8])
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=3))
    cands = _by_id(result.document)
    for bs in (1, 8):  # one IR, dynamic batch, serves both batch sizes
        direct = cands[f"openvino-fp32-direct-b{bs}"]
        assert direct["status"] == "ok", direct["reason"]
        assert direct["quality"]["drop"] < 1e-4
        assert direct["exporter"] == "openvino.convert_model (torch, no ONNX)"
        assert direct["settings"]["INFERENCE_PRECISION_HINT"] == "f32"
        # the ONNX path stays the plain fp32 candidate
        assert cands[f"openvino-fp32-b{bs}"]["exporter"] in ("dynamo", "torchscript")


def test_direct_conversion_failure_names_the_operator(tmp_path: Path) -> None:
    from bakeoff.backends import BuildContext, Variant
    from bakeoff.backends import openvino as backend
    from bakeoff.source import ModelSource
    from bakeoff.transforms import StepFailed

    (tmp_path / "tiny_model.py").write_text(MODEL_MODULE)
    np.savez(
        tmp_path / "data.npz", **{"calib/x": np.random.default_rng(0).random((4, 64), np.float32)}
    )
    source = ModelSource("torch", "tiny_model:build_custom_op", None, str(tmp_path))
    ctx = BuildContext(source, str(tmp_path / "art"), str(tmp_path / "data.npz"), ("x",), 1)
    try:
        backend.build(Variant("openvino", "fp32", "direct"), ctx)
    except StepFailed as exc:
        assert "direct conversion failed on operator bakeofftest::wobble" in str(exc)
    else:
        raise AssertionError("a custom operator OpenVINO cannot convert must fail the build")


def test_openvino_ir_builds_and_loads_without_onnx(tmp_path: Path) -> None:
    """The backend on kind "openvino" directly: every precision from the user's IR."""
    from bakeoff.backends import BuildContext, LoadContext, Variant
    from bakeoff.backends import openvino as backend
    from bakeoff.source import ModelSource

    xml = write_mlp_ir(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.random((48, 64), dtype=np.float32)
    # data named differently from the IR's input: matched by position
    np.savez(tmp_path / "data.npz", **{"calib/features": x[:32]})
    source = ModelSource("openvino", None, str(xml), str(tmp_path))
    art_dir = tmp_path / "art"
    ctx = BuildContext(source, str(art_dir), str(tmp_path / "data.npz"), ("features",), 1)
    tight = tight_gate(plain_int8_drop(xml, {"x": x[:32]}, tmp_path / "plain"))
    reference = None
    methods = []
    for precision in ("fp32", "fp16", "bf16", "int8", "int4"):
        for offer in backend.offers(precision, "openvino"):
            methods.append(offer.variant.id)
            if offer.reason:
                assert precision in ("fp16", "bf16") and "only on CPUs with native" in offer.reason
                continue
            if offer.variant.method == "nncf-aa":
                # plain INT8 passes max_drop 0.01 here; a gate it fails needs the variant
                with pytest.raises(StepNotNeeded, match="not needed"):
                    backend.build(offer.variant, ctx)
                artifact = backend.build(
                    offer.variant,
                    dataclasses.replace(ctx, gate=OutputGate(OutputRule("cosine", tight))),
                )
            else:
                artifact = backend.build(offer.variant, ctx)
            runner = backend.load(
                offer.variant, artifact, LoadContext(source, 1, 16, ("features",))
            )
            out = np.concatenate(
                [
                    runner.to_numpy(runner.run(runner.prepare({"features": x[i : i + 16]})))
                    for i in range(32, 48, 16)
                ]
            )
            if precision == "fp32":
                assert artifact["path"] == str(xml) and artifact["exporter"] == "user-provided"
                reference = out
            assert reference is not None
            cos = (
                np.sum(out * reference, 1)
                / np.linalg.norm(out, axis=1)
                / np.linalg.norm(reference, axis=1)
            )
            assert cos.min() > 0.95, (offer.variant.id, cos.min())
    assert methods == [
        "openvino-fp32",
        "openvino-fp16",
        "openvino-bf16",
        "openvino-int8-nncf",
        "openvino-int8-nncf-aa",
        "openvino-int4-weight-only",
    ]
    # a candidate's own inference_precision option wins over the variant's hint
    fp16 = Variant("openvino", "fp16")
    if backend.offers("bf16", "openvino")[0].reason is None:
        opts = {"inference_precision": "bf16"}
        lctx = LoadContext(source, 1, 16, ("features",), options=opts)
        runner = backend.load(fp16, backend.build(fp16, ctx), lctx)
        assert runner.settings["INFERENCE_PRECISION_HINT"] == "bf16"
        assert runner.settings["quantization"]["inference_precision_hint"] == "bf16"
    # no ONNX export happened: only the IR-derived steps are in the artifacts folder
    assert not (art_dir / "onnx-fp32").exists()
    assert {p.name for p in art_dir.iterdir() if p.is_dir()} == {
        "ov-int8-nncf",
        f"ov-int8-nncf-aa-cosine-{tight:g}",
        "ov-int4-weight-only",
    }


def test_openvino_ir_workload_end_to_end(tmp_path: Path, store_path: Path) -> None:
    xml = write_mlp_ir(tmp_path)
    from sklearn.datasets import load_digits

    x = (load_digits().data / 16.0).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    # max_drop so tight that plain INT8 misses it: accuracy control is built
    tight = tight_gate(plain_int8_drop(xml, {"x": x[:64]}, tmp_path / "plain"))
    (tmp_path / "w.toml").write_text(
        'name = "ir"\n[model]\nkind = "openvino"\npath = "mlp.xml"\n'
        f'[data]\npath = "data.npz"\n[quality]\nmetric = "cosine"\nmax_drop = {tight}\n'
        '[search]\nruntimes = ["openvino", "onnxruntime", "torch"]\n'
        'precisions = ["fp32", "int8"]\nbatch_sizes = [4]\n'
    )
    result = api.run(
        str(tmp_path / "w.toml"), api.RunOptions(quick=True, store=store_path, budget_s=3)
    )
    cands = _by_id(result.document)
    assert cands["openvino-fp32-b4"]["status"] == "ok", cands["openvino-fp32-b4"]["reason"]
    assert cands["openvino-fp32-b4"]["exporter"] == "user-provided"
    assert cands["openvino-fp32-b4"]["quality"]["drop"] <= 1e-6
    for cid in ("openvino-int8-nncf-b4", "openvino-int8-nncf-aa-b4"):
        assert cands[cid]["status"] in ("ok", "rejected"), cands[cid]["reason"]
    q = cands["openvino-int8-nncf-aa-b4"]["settings"]["quantization"]
    assert q["tool"] == "nncf.quantize_with_accuracy_control"
    assert (q["validation_metric"], q["max_drop"]) == ("cosine", tight)
    assert q["reverted_to_float"]
    # the other runtimes cannot take an IR, and say so
    for cid in ("onnxruntime-fp32-b4", "torch-fp32-b4"):
        assert cands[cid]["status"] == "unavailable" and "openvino" in cands[cid]["reason"]
    assert result.document["workload"]["reference"] == "openvino-fp32"


# Run with oneDNN capped to AVX2, as on a CPU without AVX-512 (the cap is read when
# OpenVINO loads, so in a process of its own).
_BF16_UNDER_AVX2 = textwrap.dedent(
    """
    import sys
    import numpy as np
    import openvino as ov
    model = ov.Core().read_model(sys.argv[1])
    try:
        compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
        # a dynamic batch: kernels are made at the first call, not at compile time
        compiled(np.zeros((2, 64), np.float32))
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
    else:
        print("APPLIED", compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
    """
)


def test_openvino_runs_no_bf16_on_an_avx2_cpu_so_its_bf16_offer_is_unavailable_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fact behind the offer: with oneDNN capped to AVX2, OpenVINO's CPU plugin
    either refuses the bf16 hint or runs another precision under it (on an AVX2-only
    CPU it reads back f32), never bf16; so on such a CPU openvino-bf16 is
    unavailable, not a candidate measured under the wrong name."""
    import subprocess
    import sys

    from bakeoff.backends import openvino as backend

    xml = write_mlp_ir(tmp_path)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    proc = subprocess.run(
        [sys.executable, "-c", _BF16_UNDER_AVX2, str(xml)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    said = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    assert said.startswith("REFUSED") or said in ("APPLIED f32", "APPLIED float32"), said
    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", "avx2")
    [offer] = backend.offers("bf16", "openvino")
    assert offer.reason is not None and "only on CPUs with native bf16" in offer.reason
