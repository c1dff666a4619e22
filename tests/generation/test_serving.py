"""`bakeoff serve` of a text-generation run: the winner's own engine server, with
the settings the run measured, or its command and why bakeoff does not start it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.errors import UserError
from bakeoff.generation import serving


def _doc(**verdicts: str | None) -> dict[str, Any]:
    return {
        "run_id": "gen-1",
        "workload": {"folder": "/models/tiny", "name": "tiny-lm"},
        "candidates": [
            {"id": "torch-fp32", "runtime": "torch", "precision": "fp32", "status": "ok",
             "settings": {}},
            {"id": "vllm-bf16", "runtime": "vllm", "precision": "bf16", "status": "ok",
             "settings": {"dtype": "bfloat16", "kv_cache_space_gib": 2.0}},
            {"id": "onnxruntime-genai-int4", "runtime": "onnxruntime-genai", "precision": "int4",
             "status": "ok", "settings": {}},
            {"id": "llama-cpp-q8_0", "runtime": "llama-cpp", "precision": "q8_0", "status": "ok",
             "settings": {}},
        ],
        "verdict": {k: {"winner": v} for k, v in verdicts.items()},
    }  # fmt: skip


def test_the_server_scenarios_winner_is_served_before_the_tpot_one() -> None:
    doc = _doc(tpot_batch_1="torch-fp32", server_rate="vllm-bf16")
    c, why = serving.chosen_candidate(doc, None)
    assert c["id"] == "vllm-bf16" and "highest request rate" in why
    c, why = serving.chosen_candidate(_doc(tpot_batch_1="torch-fp32"), None)
    assert c["id"] == "torch-fp32" and "time per output token" in why
    assert serving.chosen_candidate(doc, "torch-fp32")[0]["id"] == "torch-fp32"
    with pytest.raises(UserError, match="--candidate 'nope': not in run gen-1"):
        serving.chosen_candidate(doc, "nope")
    with pytest.raises(UserError, match="named no winner: pick one with --candidate"):
        serving.chosen_candidate(_doc(tpot_batch_1=None), None)


def test_vllm_is_served_with_the_measured_settings_and_a_token_off_loopback(
    tmp_path: Path,
) -> None:
    doc = _doc()
    vllm = doc["candidates"][1]
    engine = serving.engine_server(doc, vllm, tmp_path, "0.0.0.0", 8001, "s3cret")
    command = engine.command
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert command[command.index("--model") + 1] == "/models/tiny"
    assert command[command.index("--dtype") + 1] == "bfloat16"
    assert "--no-enable-prefix-caching" in command  # as the run measured it
    assert command[command.index("--api-key") + 1] == "s3cret"
    assert engine.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert engine.model == "tiny-lm"  # --served-model-name
    shown = serving.printable(command, engine.env)
    assert "s3cret" not in shown and shown.startswith("VLLM_CPU_KVCACHE_SPACE=2 ")


def test_transformers_serve_stays_on_loopback_and_others_say_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    doc = _doc()
    torch, _, ort, llama = doc["candidates"]
    engine = serving.engine_server(doc, torch, tmp_path, "127.0.0.1", 8002, None)
    assert engine.command[1:3] == ["serve", "/models/tiny"] and "--port" in engine.command
    assert engine.model == "/models/tiny"  # transformers serve is pinned to the folder
    with pytest.raises(UserError, match="transformers serve takes no API key"):
        serving.engine_server(doc, torch, tmp_path, "0.0.0.0", 8002, "t")
    none = serving.engine_server(doc, ort, tmp_path, "127.0.0.1", 8002, None)
    assert not none.startable and none.command == [] and "no server of its own" in none.why
    gguf = serving.engine_server(doc, llama, tmp_path, "127.0.0.1", 8002, None)
    assert not gguf.startable and "model-q8_0.gguf is not there" in gguf.why
    assert "llama_cpp.server" in gguf.command


def test_llama_cpp_is_served_by_llama_server_with_the_slots_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _doc()
    llama = doc["candidates"][3]
    measured = {"slots": 4, "context_per_slot": 128, "threads": 2, "prompt_cache": False}
    llama["settings"] = {"threads": 2, "llama_server": measured}
    binary = tmp_path / "llama-server"
    binary.write_text("")
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", str(binary))
    gguf = tmp_path / "artifacts" / "llama-cpp" / "model-q8_0.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    engine = serving.engine_server(doc, llama, tmp_path, "0.0.0.0", 8003, "s3cret")
    command = engine.command
    assert engine.startable and command[0] == str(binary) and engine.model == "tiny-lm"

    def given(flag: str) -> str:
        return command[command.index(flag) + 1]

    assert given("--model") == str(gguf) and given("--host") == "0.0.0.0"
    assert (given("--parallel"), given("--ctx-size"), given("--threads")) == ("4", "512", "2")
    assert given("--alias") == "tiny-lm" and given("--api-key") == "s3cret"
    assert "s3cret" not in serving.printable(command, engine.env)
