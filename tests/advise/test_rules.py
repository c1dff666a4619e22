"""`bakeoff advise`: the rules, their output (terminal and JSON), MXNet's refusal, the
advice-driven default run and the confirmation of advice by a run's results."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from bakeoff import advise, api, hardware
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.report.terminal import print_result

NVIDIA = ("tensorrt", "onnxruntime-tensorrt", "onnxruntime-cuda")


@pytest.fixture(scope="module")
def minilm_facts() -> advise.Facts:
    return advise.facts_for_ref("builtin:minilm")


def _no_gpu_here() -> None:
    if advise.detect_gpus()[0]:
        pytest.skip("this machine has an NVIDIA GPU; the exclusion needs one without")


def _ids(report: advise.AdviceReport) -> set[str]:
    return {a.id for a in report.advice}


# ---------------------------------------------------------------- acceptance


def test_cli_server_gpu_excludes_tensorrt_and_cuda_providers_with_the_reason() -> None:
    _no_gpu_here()
    runner = CliRunner()
    shown = runner.invoke(app, ["advise", "builtin:minilm", "--target", "server-gpu"])
    assert shown.exit_code == 0, shown.output
    assert "excluded" in shown.output and "no NVIDIA GPU on this machine" in shown.output
    as_json = runner.invoke(app, ["advise", "builtin:minilm", "--target", "server-gpu", "--json"])
    doc = json.loads(as_json.output)
    excluded = {e["what"]: e["why"] for e in doc["excluded"]}
    for runtime in NVIDIA:
        assert excluded[runtime].startswith("no NVIDIA GPU on this machine"), excluded
    assert not {p["runtime"] for p in doc["proposed"]} & set(NVIDIA)
    assert doc["target"] == "server-gpu" and doc["target_source"] == "stated"


def test_edge_intel_proposes_openvino_int8() -> None:
    report = api.advise("builtin:minilm", target="edge-intel")
    ov_int8 = next(p for p in report.proposed if (p.runtime, p.precision) == ("openvino", "int8"))
    assert "nncf" in ov_int8.methods
    assert "measured-here" in _ids(report)  # timed here, not on the edge device
    shown = CliRunner().invoke(app, ["advise", "builtin:minilm", "--target", "edge-intel"])
    assert shown.exit_code == 0 and "openvino" in shown.output and "int8" in shown.output


def _mxnet_workload(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(f'name = "old"\n[model]\n{model}\n[data]\npath = "d.npz"\n')
    return path


@pytest.mark.parametrize(
    "model", ['kind = "mxnet"\npath = "net-symbol.json"', 'kind = "onnx"\npath = "net-0000.params"']
)
def test_mxnet_is_refused_with_the_migration_hint(tmp_path: Path, model: str) -> None:
    wl = _mxnet_workload(tmp_path, model)
    for call in (lambda: api.advise(str(wl)), lambda: api.run(str(wl))):
        with pytest.raises(UserError) as err:
            call()
        text = str(err.value)
        assert "MXNet is retired" in text and "Apache Attic" in text
        assert "mx.onnx.export_model" in text and 'kind = "onnx"' in text


def test_cli_refuses_mxnet_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    wl = _mxnet_workload(tmp_path, 'kind = "mxnet"')
    proc = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "advise", str(wl)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "MXNet is retired" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- any CPU

# The CPUs development and CI machines have had (BAKEOFF_CPU_FLAGS simulates each).
PROFILES = {
    "avx2": "avx2,fma,avx",
    "avx512-vnni-bf16": "avx2,avx512f,avx512bw,avx512_vnni,avx512_bf16",
    "amx": "avx2,avx512f,avx512_vnni,avx512_bf16,amx_tile,amx_int8,amx_bf16",
}


def _proposed(report: advise.AdviceReport) -> dict[tuple[str, str], advise.Proposal]:
    return {(p.runtime, p.precision): p for p in report.proposed}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_int8_is_proposed_on_every_x86_profile_with_the_path_it_has(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Advice proposes, measurement decides: a CPU flag explains, never removes INT8."""
    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", PROFILES[profile])
    report = advise.advise("builtin:minilm", target="server-cpu")
    assert report.facts.cpu_flags_source == "BAKEOFF_CPU_FLAGS"
    assert "(simulated by BAKEOFF_CPU_FLAGS)" in report.facts.describe()
    proposed = _proposed(report)
    assert proposed[("onnxruntime", "int8")].methods == ("dynamic",)
    assert "nncf" in proposed[("openvino", "int8")].methods
    assert ("torch", "int8") in proposed
    # BF16 joins the grid where the CPU has it natively, for every goal: the default
    # run measures batch 32, where BF16 pays (and autocast reaches torch-compile too)
    native_bf16 = profile != "avx2"
    assert report.run_grid() == (
        ["torch", "torch-compile", "onnxruntime", "openvino"],
        ["fp32", "bf16", "int8"] if native_bf16 else ["fp32", "int8"],
    )
    if native_bf16:
        bf16 = proposed[("openvino", "bf16")].reason
        assert "native BF16" in bf16 and "measured at every batch size" in bf16, bf16
        assert ("torch", "bf16") in proposed
    else:
        assert not any(precision == "bf16" for _, precision in proposed)
    why = proposed[("onnxruntime", "int8")].reason
    excluded = {e.what: e.why for e in report.excluded}
    if profile == "avx2":
        assert "16-bit multiply-adds" in why and "unproven on this CPU" in why, why
        assert "measured" in why
        # BF16 is out of the default grid on cost grounds only, and says how to ask.
        assert "--precisions fp32,bf16,int8" in excluded["bf16"], excluded
    else:
        assert "native INT8 dot products" in why, why
        assert "bf16" not in excluded
        assert ("amx_int8" in why) == (profile == "amx")
    assert "int8" not in excluded


def test_an_x86_cpu_without_avx2_leaves_int8_out_and_says_how_to_measure_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", "")
    report = advise.advise("builtin:minilm", target="server-cpu")
    assert ("onnxruntime", "int8") not in _proposed(report)
    why = {e.what: e.why for e in report.excluded}["int8"]
    assert "no AVX2" in why and "--precisions fp32,int8" in why


def test_cli_advise_with_simulated_avx2_proposes_int8_as_unproven() -> None:
    env = {"BAKEOFF_CPU_FLAGS": "avx2"}
    shown = CliRunner().invoke(app, ["advise", "builtin:minilm", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    int8 = {p["runtime"]: p for p in doc["proposed"] if p["precision"] == "int8"}
    assert "dynamic" in int8["onnxruntime"]["methods"] and "nncf" in int8["openvino"]["methods"]
    for p in int8.values():
        assert "unproven on this CPU" in p["reason"] and "measured" in p["reason"]
    assert doc["facts"]["cpu_flags"] == ["avx2"]


def test_a_malformed_cpu_flags_override_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", "avx2;rm -rf")
    with pytest.raises(UserError, match=r"BAKEOFF_CPU_FLAGS.*not a CPU flag name"):
        advise.advise("builtin:minilm")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_offers_build_what_the_runtime_runs_and_note_what_this_cpu_emulates(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A precision without native arithmetic is built with a note; `unavailable` is
    for what the runtime itself refuses (OpenVINO's hints, ORT's missing bf16 kernels)."""
    from bakeoff.backends import jax_backend, keras_jax, onnxruntime, openvino, torch_eager
    from bakeoff.environment import fingerprint

    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", PROFILES[profile])
    native_bf16 = profile != "avx2"
    for offer in (
        torch_eager.offers("bf16", "torch")[0],
        jax_backend.offers("bf16", "jax")[0],
        keras_jax.offers("bf16", "keras")[0],
    ):
        assert offer.reason is None, offer
        if native_bf16:
            assert offer.note is None, offer
        else:
            assert offer.note == "bf16 is emulated on this CPU (no avx512_bf16/amx_bf16)"
    # fp16: native on none of these profiles; torch and ORT run it anyway, noted.
    for offer in (torch_eager.offers("fp16", "torch")[0], onnxruntime.offers("fp16", "onnx")[0]):
        assert offer.reason is None and offer.note is not None and "emulated" in offer.note
    ov_bf16 = openvino.offers("bf16", "onnx")[0]
    assert (ov_bf16.reason is None) == native_bf16, ov_bf16
    assert "only on CPUs with native fp16" in str(openvino.offers("fp16", "onnx")[0].reason)
    assert "no bfloat16 kernels" in str(onnxruntime.offers("bf16", "onnx")[0].reason)
    int8_notes = {
        o.note for o in onnxruntime.offers("int8", "onnx") + openvino.offers("int8", "onnx")
    }
    if profile == "avx2":
        assert int8_notes == {
            "int8 runs through 16-bit multiply-adds on this CPU (AVX2, none of "
            "avx512_vnni/avx_vnni/amx_int8): it may or may not beat fp32 here"
        }
    else:
        assert int8_notes == {None}
    cpu = fingerprint()["cpu"]
    assert cpu["flags_simulated"] == PROFILES[profile]
    assert "detected_flags" in cpu and "avx2" in cpu["flags"]


def test_without_the_override_the_flags_are_this_cpus_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff import hardware
    from bakeoff.environment import fingerprint

    monkeypatch.delenv("BAKEOFF_CPU_FLAGS", raising=False)
    assert hardware.cpu_flags() == hardware.detected_cpu_flags()
    cpu = fingerprint()["cpu"]
    assert "flags_simulated" not in cpu
    assert cpu["flags"] == [f for f in hardware.NOTABLE_FLAGS if f in hardware.detected_cpu_flags()]


# ---------------------------------------------------------------- facts and rules


def test_minilm_folder_is_a_pretrained_transformer_counted_from_safetensors(
    minilm_facts: advise.Facts,
) -> None:
    from bakeoff.builtins.minilm import model_folder

    facts = advise.model_facts("hf", model_folder(), None, None)
    assert facts["family"] == "transformer" and facts["architecture"] == "BertModel"
    assert facts["pretrained"] and facts["params_source"] == "safetensors header"
    assert 22_000_000 < facts["params"] < 23_500_000  # all-MiniLM-L6-v2: 22.7M
    assert minilm_facts.family == "transformer"
    assert "pretrained transformer (BertModel)" in minilm_facts.describe()


def test_generative_llm_config_gets_vllm_and_weight_compression(tmp_path: Path) -> None:
    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "vocab_size": 32000,
            }
        )
    )
    facts = advise.detect_facts("llm.toml", "hf", str(folder), None, None)
    assert facts.family == "llm" and facts.params_source == "estimate from config.json"
    cpu = advise.advise_facts(facts, target="server-cpu")
    assert ("openvino", "int4") in {(p.runtime, p.precision) for p in cpu.proposed}
    gpu = advise.advise_facts(facts, target="server-gpu")
    for advice in (cpu, gpu):  # vLLM's CPU build runs too: measured by the generative kind
        vllm = next(a for a in advice.advice if a.id == "llm-vllm")
        assert "vLLM" in vllm.text and 'task = "text-generation"' in vllm.text
    assert "llm-measures-prefill" in _ids(gpu)


def test_with_an_nvidia_gpu_the_default_target_is_server_gpu_and_no_hardware_exclusion(
    minilm_facts: advise.Facts,
) -> None:
    facts = dataclasses.replace(minilm_facts, gpus=(advise.Gpu("NVIDIA H100", 81559),))
    report = advise.advise_facts(facts)
    assert report.target == "server-gpu" and report.target_source == "detected"
    for e in report.excluded:
        assert "no NVIDIA GPU" not in e.why, e  # out only for a missing backend or package
    assert {"transformer-nvidia", "nvidia"} <= _ids(report)


def test_custom_architecture_warns_that_custom_operators_may_not_export(tmp_path: Path) -> None:
    facts = advise.detect_facts("w.toml", "torch", None, None, "model:build")
    report = advise.advise_facts(facts, target="server-cpu")
    warning = next(a for a in report.advice if a.id == "custom-architecture")
    assert warning.warning and "may not export" in warning.text
    assert "tvm" in _ids(report)
    assert report.proposed[0].runtime == "torch"


def test_about_a_millisecond_baseline_says_the_stack_may_not_pay(
    minilm_facts: advise.Facts,
) -> None:
    fast = advise.advise_facts(minilm_facts, baseline_ms=0.8)
    small = next(a for a in fast.advice if a.id == "small-model")
    assert small.warning and "may not pay for its complexity" in small.text
    assert "takes 0.8 ms per call" in small.text
    tiny = advise.advise_facts(minilm_facts, baseline_ms=0.0042)
    assert "takes 0.0042 ms per call" in next(a for a in tiny.advice if a.id == "small-model").text
    assert "small-model" not in _ids(advise.advise_facts(minilm_facts, baseline_ms=25.0))


def test_training_rules(minilm_facts: advise.Facts) -> None:
    small = advise.advise_facts(minilm_facts, train=True)
    one = next(a for a in small.advice if a.id == "train-one-device")
    assert "mixed precision" in one.text and "gradient accumulation" in one.text
    assert "train-sharded" not in _ids(small) and "train-ddp" not in _ids(small)
    assert "train-one-device" not in _ids(advise.advise_facts(minilm_facts))
    big = dataclasses.replace(
        minilm_facts,
        params=7_000_000_000,
        gpus=(advise.Gpu("NVIDIA L4", 24576), advise.Gpu("NVIDIA L4", 24576)),
    )
    report = advise.advise_facts(big, train=True)
    sharded = next(a for a in report.advice if a.id == "train-sharded")
    for name in ("FSDP", "DeepSpeed ZeRO", "LoRA"):
        assert name in sharded.text
    assert "train-ddp" in _ids(report) and "train-one-device" not in _ids(report)


def test_bad_target_and_goal_are_user_errors() -> None:
    with pytest.raises(UserError, match="--target"):
        api.advise("builtin:minilm", target="toaster")
    with pytest.raises(UserError, match="--goal"):
        api.advise("builtin:minilm", goal="fastest")


def test_json_shape() -> None:
    doc = json.loads(
        CliRunner().invoke(app, ["advise", "builtin:digits", "--train", "--json"]).output
    )
    assert set(doc) >= {"target", "goal", "train", "facts", "proposed", "excluded", "advice"}
    assert doc["facts"]["family"] == "cnn" and doc["facts"]["params"] == 38282
    for p in doc["proposed"]:
        assert set(p) == {"runtime", "precision", "methods", "reason", "advice"} and p["reason"]
    for e in doc["excluded"]:
        assert e["what"] and e["why"]
    for a in doc["advice"]:
        assert {"id", "text", "reason", "proposes", "excludes", "confirm"} <= set(a)


# ---------------------------------------------------------------- the run


def test_default_minilm_run_keeps_its_candidate_grid() -> None:
    """A benchmark depends on it: torch, torch-compile, onnxruntime, openvino x fp32,
    int8, and bf16 where this CPU has it natively (each branch is asserted on a
    simulated CPU above)."""
    from bakeoff import hardware

    report = advise.advise("builtin:minilm", target="server-cpu")
    native_bf16 = any(f in report.facts.cpu_flags for f in hardware.NATIVE["bf16"])
    assert report.run_grid() == (
        ["torch", "torch-compile", "onnxruntime", "openvino"],
        ["fp32", "bf16", "int8"] if native_bf16 else ["fp32", "int8"],
    )


def test_a_transformer_run_leaves_out_static_ort_int8_and_says_how_to_ask_for_it(
    minilm_facts: advise.Facts,
) -> None:
    from bakeoff.candidates import enumerate_candidates, explicit_candidates
    from bakeoff.workload import CandidateSpec

    report = advise.advise_facts(minilm_facts, target="server-cpu")
    ort_int8 = next(
        p for p in report.proposed if (p.runtime, p.precision) == ("onnxruntime", "int8")
    )
    assert ort_int8.methods == ("dynamic",)
    left_out = report.left_out_methods()
    assert list(left_out) == ["onnxruntime-int8-static"]
    assert "dynamic INT8 for transformers" in left_out["onnxruntime-int8-static"]
    assert 'method = "static"' in left_out["onnxruntime-int8-static"]
    shown = CliRunner().invoke(app, ["advise", "builtin:minilm", "--target", "server-cpu"])
    assert "onnxruntime-int8-static" in shown.output
    # The run enumerates every other variant of the proposed runtimes and precisions.
    ids = [
        c.id
        for c in enumerate_candidates(["onnxruntime"], ["int8"], [1], "hf", frozenset(left_out))
    ]
    assert ids == ["onnxruntime-int8-dynamic-b1"]
    # A hand-written candidate still gets it.
    spec = CandidateSpec(label="s", runtime="onnxruntime", precision="int8", method="static")
    [asked] = explicit_candidates([spec], None, None, [1], "hf")
    assert (asked.variant.id, asked.status) == ("onnxruntime-int8-static", "pending")
    # Not a transformer: both ONNX Runtime INT8 methods stay.
    cnn = dataclasses.replace(minilm_facts, family="cnn", model_kind="torch")
    cnn_report = advise.advise_facts(cnn, target="server-cpu")
    assert cnn_report.left_out_methods() == {}
    assert next(
        p.methods
        for p in cnn_report.proposed
        if (p.runtime, p.precision) == ("onnxruntime", "int8")
    ) == ("dynamic", "static")


def _candidate(cid: str, runtime: str, precision: str, status: str = "ok", **kw: Any) -> dict:
    return {"id": cid, "runtime": runtime, "precision": precision, "status": status, **kw}


def _verdict(bs: int, winner: str | None, baseline: str, speedup: float | None) -> dict:
    sp = None if speedup is None else {"value": speedup, "ci95": [speedup, speedup]}
    return {"batch_size": bs, "winner": winner, "baseline": baseline, "speedup": sp, "ties": []}


def test_confirmations_on_a_hand_made_result(minilm_facts: advise.Facts) -> None:
    report = advise.advise_facts(minilm_facts, target="edge-intel").to_dict()
    lat = {"p50": 3.0}
    doc = {
        "candidates": [
            _candidate("torch-fp32-b1", "torch", "fp32", latency_ms={"p50": 12.0}),
            _candidate("openvino-int8-nncf-b1", "openvino", "int8", latency_ms=lat),
            _candidate(
                "onnxruntime-fp32-b1",
                "onnxruntime",
                "fp32",
                "rejected",
                reason="quality",
                quality={"metric": "cosine", "drop": 0.03, "max_drop": 0.01},
            ),
            _candidate("torch-compile-fp32-b1", "torch-compile", "fp32", "failed", reason="x"),
        ],
        "verdicts": [_verdict(1, "openvino-int8-nncf-b1", "torch-fp32-b1", 4.1)],
    }
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    assert checked["reference"]["confirmed"] is True
    int8 = checked["cpu-int8"]
    assert int8["confirmed"] is True
    assert int8["why"] == (
        "measured: openvino-int8-nncf-b1 is fastest at batch 1, 4.10× over the baseline "
        "torch-fp32-b1"
    )
    # Advice on where to deploy holds when that runtime wins at any precision.
    openvino = checked["openvino-edge-intel"]
    assert openvino["confirmed"] is True and "openvino-int8-nncf-b1" in openvino["why"]
    general = checked["onnxruntime-general"]
    assert general["confirmed"] is False and "drop 0.03" in general["why"]
    assert checked["torch-compile"]["confirmed"] is None
    assert checked["measured-here"]["confirmed"] is None  # text only
    assert "small-model" not in checked  # a 12 ms baseline leaves plenty to win
    doc["candidates"][0]["latency_ms"] = {"p50": 0.9}
    doc["candidates"][1]["latency_ms"] = {"p50": 0.7}
    small = advise.confirmations(report, doc)["advice"][-1]
    assert small["id"] == "small-model" and small["confirmed"] is True
    assert "saves 0.2 ms per call" in small["why"]


def test_advice_picks_the_candidates_of_a_run_and_is_confirmed_in_its_document(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake-runtime run without [search]: the advice (here: fake FP32 only, instead
    of the default FP32 + INT8) picks the candidates; the document says what came of it."""
    np.savez(tmp_path / "d.npz", input=np.random.default_rng(0).random((64, 8), np.float32))
    (tmp_path / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\noptions = { latency_ms = 1.0 }\n'
        '[data]\npath = "d.npz"\n'
    )
    from bakeoff.inference import pipeline

    real = pipeline.advice_for

    def fake_fp32_only(workload: Any, target: str | None) -> advise.AdviceReport:
        report = real(workload, target)
        item = advise.Advice(
            "fake-reference",
            "fake FP32",
            "the only runtime for fake models",
            proposes=[("fake", "fp32")],
            confirm="reference",
        )
        report.advice.append(item)
        report.proposed, report.excluded = advise.collect(report.advice, "fake")
        # as the advice leaves ONNX Runtime's static INT8 out for a transformer
        report.excluded.append(advise.Exclusion("fake-fp32-other", "not for this model", "x"))
        return report

    # A second fake FP32 method, offered in this process only: the run must leave it out.
    from bakeoff.backends import Offer, Variant
    from bakeoff.backends import fake as fake_backend

    offers = fake_backend.offers
    monkeypatch.setattr(
        fake_backend,
        "offers",
        lambda precision, kind: [*offers(precision, kind), Offer(Variant("fake", "fp32", "other"))],
    )
    monkeypatch.setattr(pipeline, "advice_for", fake_fp32_only)
    result = api.run(
        str(tmp_path / "w.toml"),
        api.RunOptions(quick=True, store=store_path, batch_sizes=[1], budget_s=1),
    )
    doc = result.document
    assert doc["settings"]["candidates_from"] == "advice"
    assert [c["id"] for c in doc["candidates"]] == ["fake-fp32-b1"]
    item = next(a for a in doc["advice"]["advice"] if a["id"] == "fake-reference")
    assert item["confirmed"] is True and "fake-fp32-b1" in item["why"]
    console = Console(record=True, width=160)
    print_result(doc, console)
    shown = console.export_text()
    assert "✓ fake FP32" in shown
    assert doc["settings"]["left_out"] == {"fake-fp32-other": "not for this model"}
    assert "Left out (not built" in shown and "fake-fp32-other: not for this model" in shown
    from bakeoff.report.data import load
    from bakeoff.report.html import render

    page = render(load(result.run_id, store_path))
    assert "Left out: <code>fake-fp32-other</code>, not for this model." in page


# ---------------------------------------------------------------- words true of this machine


@pytest.mark.parametrize("vendor", ["intel", "amd", "hygon", None])
def test_openvino_advice_names_the_cpu_this_is(
    vendor: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An advice line is true of the detected (or simulated) machine: on AMD no
    "Intel hardware" claim; on Intel it says so."""
    if vendor is None:
        monkeypatch.delenv("BAKEOFF_CPU_VENDOR", raising=False)
    else:
        monkeypatch.setenv("BAKEOFF_CPU_VENDOR", vendor)
    report = advise.advise("builtin:minilm", target="server-cpu")
    expected = {"intel": "Intel", "amd": "AMD", "hygon": "Hygon"}.get(
        vendor or "", hardware.detected_cpu_vendor()
    )
    assert report.facts.cpu_vendor == expected
    assert f"{expected} CPU" in report.facts.describe()
    [ov] = [a for a in report.advice if a.id == "openvino-server-cpu"]
    said = f"{ov.text}: {ov.reason}"
    if expected == "Intel":
        assert ov.text == "OpenVINO on this Intel CPU"
    else:
        assert "Intel hardware" not in said and "on this Intel" not in said
        assert ov.text == f"OpenVINO as a candidate on this {expected} CPU"
        assert "unproven, so it is measured" in ov.reason
    # No other line claims a vendor this CPU is not.
    for a in report.advice:
        if expected != "Intel":
            assert "Intel hardware" not in a.text + a.reason, a


def test_a_malformed_vendor_override_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CPU_VENDOR", "cyrix")
    with pytest.raises(UserError, match="BAKEOFF_CPU_VENDOR='cyrix': expected one of amd"):
        hardware.cpu_vendor()


def test_advice_the_run_did_not_measure_says_who_left_it_out(
    minilm_facts: advise.Facts, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = advise.advise_facts(minilm_facts, target="server-cpu").to_dict()
    only_fp32 = {
        "runtimes": ["torch", "onnxruntime"],
        "precisions": ["fp32"],
        "grid_from": {"runtimes": "--runtimes", "precisions": "--precisions"},
    }
    doc = {
        "settings": only_fp32,
        "candidates": [
            _candidate("torch-fp32-b1", "torch", "fp32", latency_ms={"p50": 12.0}),
            _candidate("onnxruntime-fp32-b1", "onnxruntime", "fp32", latency_ms={"p50": 6.0}),
        ],
        "verdicts": [_verdict(1, "onnxruntime-fp32-b1", "torch-fp32-b1", 2.0)],
    }
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    int8 = checked["cpu-int8"]
    assert int8["confirmed"] is None
    assert "int8 left out by you (--precisions fp32)" in int8["why"]
    ov = checked["openvino-server-cpu"]
    assert ov["confirmed"] is None
    assert ov["why"] == "openvino left out by you (--runtimes torch,onnxruntime)"
    # The workload's own [search] and the defaults are named as such.
    doc["settings"] = {**only_fp32, "grid_from": {"runtimes": "workload", "precisions": "workload"}}
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    assert (
        "int8 left out by the workload ([search] precisions = fp32)" in checked["cpu-int8"]["why"]
    )
    # Advice that left its own proposals out says so, with its reason.
    monkeypatch.setenv("BAKEOFF_CPU_FLAGS", "")  # an x86 CPU without AVX2
    no_avx2 = advise.advise("builtin:minilm", target="server-cpu").to_dict()
    checked = {a["id"]: a for a in advise.confirmations(no_avx2, doc)["advice"]}
    why = checked["cpu-int8"]["why"]
    assert why.startswith("left out by the advice: left out of the default grid: this x86 CPU")
    # A run stored before runs recorded who chose the grid still says what it can.
    doc["settings"] = {"runtimes": ["torch"], "precisions": ["fp32"]}
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    assert checked["openvino-server-cpu"]["why"] == "openvino was not in the run"


def test_a_leader_tied_with_the_baseline_does_not_confirm_that_it_pays(
    minilm_facts: advise.Facts,
) -> None:
    report = advise.advise_facts(minilm_facts, target="server-cpu").to_dict()
    tied = {
        **_verdict(32, "openvino-fp32-b32", "torch-fp32-b32", 1.12),
        "standing": "baseline-tied",
        "ties": [["openvino-fp32-b32", "torch-fp32-b32"]],
    }
    doc = {
        "settings": {},
        "candidates": [
            _candidate("torch-fp32-b32", "torch", "fp32"),
            _candidate("openvino-fp32-b32", "openvino", "fp32"),
        ],
        "verdicts": [tied],
    }
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    ov = checked["openvino-server-cpu"]
    assert ov["confirmed"] is False
    assert ov["why"] == (
        "measured: openvino-fp32-b32 leads at batch 32, but is not separated from the "
        "baseline torch-fp32-b32"
    )
    assert "1.12" not in ov["why"]
    assert checked["reference"]["confirmed"] is True


def test_a_runtime_the_quick_run_left_out_says_so(minilm_facts: advise.Facts) -> None:
    """--quick leaves out the runtimes that compile at load; the advice that proposed
    one says it was not measured, why, and how to measure it."""
    report = advise.advise_facts(minilm_facts, target="server-cpu").to_dict()
    why = "--quick leaves it out: it compiles at each batch size's first call"
    doc = {
        "settings": {
            "runtimes": ["torch", "onnxruntime", "openvino"],
            "precisions": ["fp32", "int8"],
            "grid_from": {"runtimes": "advice", "precisions": "advice"},
            "left_out": {"torch-compile": why},
        },
        "candidates": [_candidate("torch-fp32-b1", "torch", "fp32", latency_ms={"p50": 12.0})],
        "verdicts": [_verdict(1, "torch-fp32-b1", "torch-fp32-b1", None)],
    }
    checked = {a["id"]: a for a in advise.confirmations(report, doc)["advice"]}
    assert checked["torch-compile"]["confirmed"] is None
    assert checked["torch-compile"]["why"] == f"torch-compile: {why}"


def test_a_savedmodel_gets_openvino_int8_proposed_as_other_kinds_do(tf_models: Path) -> None:
    """OpenVINO converts a SavedModel itself, so NNCF INT8 is built from it as from
    any IR (a real multi-output SavedModel, basic-pitch's, was left at FP32)."""
    from tf_models import SAVEDMODEL

    report = advise.advise(str(tf_models / SAVEDMODEL), target="server-cpu")
    assert "nncf" in _proposed(report)[("openvino", "int8")].methods
