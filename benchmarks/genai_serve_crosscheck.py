"""Cross-check bakeoff's TTFT and TPOT under Poisson arrivals against NVIDIA's AIPerf,
on one engine's own OpenAI-compatible server.

What: vLLM's server (the CPU build, from `make vllm`) serves the built-in tiny-lm
at float32; the same Poisson schedule (bakeoff's `poisson_times`: the same prompts
at the same arrival times) is sent to it by bakeoff's own client
(`bakeoff.generators.openai_endpoint`) and by AIPerf 0.13.0 (`make aiperf`, a venv
of its own), which replays it with `--fixed-schedule` from a single-turn JSONL
file whose rows carry each prompt, its arrival time and its output length. The
figures are the ratios of their medians, bakeoff / AIPerf, for TTFT and for TPOT
(AIPerf's inter-token latency: (end-to-end - TTFT) / (output tokens - 1), the
definition bakeoff's `Served.tpot_ns` uses); target 0.95-1.05.

Why this shape:
- Same requests: greedy, `max_tokens` N with `ignore_eos`, so every answer is N
  tokens long on both sides, and token counts are the server's own
  (`--use-server-token-count`; bakeoff reads `usage.completion_tokens`), so no
  tokenizer decides a figure.
- Drift: the two clients take turns (bakeoff, AIPerf, bakeoff, AIPerf: `--passes`),
  and each one's medians are averaged over its passes; when bakeoff's own passes
  disagree by more than 5% the script says so.
- A warm-up goes first: every prompt twice (vLLM's first requests at a new
  length are slower: in a first try without it, bakeoff's first pass was 11-17%
  slower than its second).
- One machine, its cores split: the server gets the first half (vLLM's OpenMP
  threads bound to them), the clients the rest. Sharing them, AIPerf's service
  processes (11 s of CPU a pass against bakeoff's client's 1 s) slowed the server
  they measured: on 2 cores its TPOT came out 20% above bakeoff's. The CPU time
  each client spent is printed beside the figures.

    make vllm aiperf && HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/genai_serve_crosscheck.py
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

from bakeoff.builtins import tiny_lm
from bakeoff.generation import serving
from bakeoff.generators import openai_endpoint
from bakeoff.generators.arrivals import Served, poisson_times

AIPERF = Path(".venv-aiperf/bin/aiperf")
NAME = "tiny-lm"
HUB_NAME = "bakeoff/tiny-lm"  # its tokenizer's name in AIPerf's hub cache


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def split_cores() -> tuple[set[int], set[int]]:
    """The server's cores and the clients': half each (a client's own CPU, AIPerf's
    service processes above all, would otherwise slow the server it measures)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("the cross-check needs 2 cores: one for the server, one for a client")
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def start_vllm(folder: Path, port: int, log: Path, cores: set[int]) -> subprocess.Popen[bytes]:
    doc = {"workload": {"folder": str(folder), "name": NAME}}
    c = {
        "id": "vllm-fp32",
        "runtime": "vllm",
        "precision": "fp32",
        "settings": {"dtype": "float32", "kv_cache_space_gib": 1},
    }
    engine = serving.engine_server(doc, c, folder, "127.0.0.1", port, None)
    if not engine.startable:
        raise SystemExit(f"vLLM cannot start: {engine.why}")
    print("$ " + serving.printable(engine.command, engine.env), flush=True)
    env = dict(os.environ, **engine.env, HF_HUB_OFFLINE="1")
    # vLLM binds its OpenMP threads to the cores it is given here, one thread each
    env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(cores))
    return subprocess.Popen(
        engine.command,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )


def wait_ready(url: str, server: subprocess.Popen[bytes], log: Path, limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(
                f"vLLM's server ended ({server.returncode}):\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"vLLM's server was not ready in {limit_s:.0f} s")


def medians_ms(served: list[Served]) -> tuple[float, float]:
    ttft = np.median([s.ttft_ns for s in served]) / 1e6
    tpot = np.median([s.tpot_ns for s in served]) / 1e6
    return float(ttft), float(tpot)


def bakeoff_client(
    url: str, schedule: list[tuple[int, str]], tokens: int
) -> tuple[float, float, float]:
    cpu = time.process_time()
    served, stamps = openai_endpoint.send(url, NAME, schedule, tokens, extra={"ignore_eos": True})
    cpu = time.process_time() - cpu
    failed = [s.error for s in stamps if s.error]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, e.g. {failed[0]}")
    short = [s.tokens for s in served if s.tokens != tokens]
    if short:
        raise SystemExit(f"{len(short)} answers were not {tokens} tokens long: {short[:5]}")
    ttft, tpot = medians_ms(served)
    return ttft, tpot, cpu


def hub_cache_with(model: Path, cache: Path) -> Path:
    """A Hugging Face hub cache that holds the model folder's tokenizer as HUB_NAME.
    Offline, AIPerf 0.13.0 looks a tokenizer up in the hub cache even when given a
    local path (and fails on the path); its "builtin" tokenizer downloads its
    encoding. It tokenizes nothing that counts here (--use-server-token-count)."""
    revision = "0" * 40
    repo = cache / f"models--{HUB_NAME.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        if (model / name).exists():
            (snapshot / name).write_bytes((model / name).read_bytes())
    return cache


def aiperf_client(
    url: str,
    schedule: list[tuple[int, str]],
    tokens: int,
    model: Path,
    folder: Path,
    cores: set[int],
) -> tuple[float, float, float]:
    folder.mkdir(parents=True)
    data = folder / "schedule.jsonl"
    with data.open("w") as f:
        for at_ns, prompt in schedule:
            row = {"text": prompt, "timestamp": at_ns / 1e6, "output_length": tokens}
            f.write(json.dumps(row) + "\n")
    out = folder / "aiperf"
    cmd = [
        str(AIPERF), "profile", "--model", NAME, "--url", url, "--endpoint-type", "completions",
        "--streaming", "--input-file", str(data), "--custom-dataset-type", "single_turn",
        "--fixed-schedule", "--tokenizer", HUB_NAME, "--use-server-token-count",
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0",
        "--workers-max", "1", "--record-processors", "1", "--ui-type", "none",
        "--output-artifact-dir", str(out), "--export-level", "records",
    ]  # fmt: skip
    print("$ " + " ".join(cmd[:3]) + " ...", flush=True)
    env = dict(os.environ, HOME=str(folder), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["HF_HUB_CACHE"] = str(hub_cache_with(model, folder / "hub"))
    log = folder / "aiperf.log"  # a file, not a pipe nobody reads while it runs
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
    tree = psutil.Process(proc.pid)
    seen: dict[int, float] = {}
    while proc.poll() is None:  # sum the CPU time of AIPerf's process tree as it runs
        for p in [tree, *tree.children(recursive=True)]:
            try:
                t = p.cpu_times()
                seen[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        time.sleep(0.5)
    cpu = sum(seen.values())
    output = log.read_text(errors="replace")
    summary = out / "profile_export_aiperf.json"
    if proc.returncode != 0 or not summary.exists():
        raise SystemExit(f"aiperf failed ({proc.returncode}):\n{output[-3000:]}")
    doc = json.loads(summary.read_text())
    ttft = doc["time_to_first_token"]
    itl = doc["inter_token_latency"]
    units = {"ms": 1.0, "ns": 1e-6, "us": 1e-3, "s": 1e3}
    count = doc.get("request_count", {}).get("avg")
    if count is not None and int(count) != len(schedule):
        raise SystemExit(f"aiperf completed {count} of {len(schedule)} requests")
    length = doc.get("output_sequence_length", {}).get("avg")
    if length is not None and abs(length - tokens) > 1e-6:
        raise SystemExit(f"aiperf's answers were {length} tokens long on average, not {tokens}")
    return ttft["p50"] * units[ttft["unit"]], itl["p50"] * units[itl["unit"]], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=4.0, help="requests/s offered")
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--passes", type=int, default=4, help="of each client, alternated")
    args = parser.parse_args()
    if not AIPERF.exists():
        raise SystemExit("AIPerf is not installed: make aiperf")
    folder = tiny_lm.train_if_needed()
    model = folder / "model"
    prompts = [p for p in (folder / "prompts.txt").read_text().splitlines() if p]
    times = poisson_times(args.rate, args.requests, len(prompts), args.seed)
    schedule = [(at, prompts[i]) for at, i in times]
    warm_times = poisson_times(args.rate, 2 * len(prompts), len(prompts), 99)
    warm = [(at, prompts[k % len(prompts)]) for k, (at, _) in enumerate(warm_times)]
    print(
        f"tiny-lm on vLLM's server: {args.requests} requests, Poisson at {args.rate:g}/s "
        f"(seed {args.seed}), {len(prompts)} prompts, {args.tokens} tokens each",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bakeoff-genai-xcheck-") as tmp:
        root = Path(tmp)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = root / "vllm.log"
        server_cores, client_cores = split_cores()
        print(f"server on cores {sorted(server_cores)}, clients on {sorted(client_cores)}")
        server = start_vllm(model, port, log, server_cores)
        os.sched_setaffinity(0, client_cores)  # bakeoff's client: this process
        passes: dict[str, list[tuple[float, float, float]]] = {"bakeoff": [], "AIPerf": []}
        try:
            wait_ready(url, server, log)
            # every prompt twice first: vLLM's first requests at each length are slower
            openai_endpoint.send(url, NAME, warm, args.tokens, extra={"ignore_eos": True})
            for k in range(args.passes):  # alternated, so drift falls on both alike
                passes["bakeoff"].append(bakeoff_client(url, schedule, args.tokens))
                passes["AIPerf"].append(
                    aiperf_client(
                        url, schedule, args.tokens, model, root / f"aiperf-{k}", client_cores
                    )
                )
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    print()
    print(f"{'':28}{'TTFT p50 ms':>12}{'TPOT p50 ms':>12}{'client CPU s':>14}")
    for k in range(args.passes):
        for who in passes:
            ttft, tpot, cpu = passes[who][k]
            label = f"{who} (pass {k + 1})"
            print(f"{label:28}{ttft:12.2f}{tpot:12.3f}{cpu:14.1f}")
    mean = {
        who: [float(np.mean([p[i] for p in runs])) for i in (0, 1)] for who, runs in passes.items()
    }
    for i, what in ((0, "TTFT"), (1, "TPOT")):
        runs = [p[i] for p in passes["bakeoff"]]
        drift = (max(runs) - min(runs)) / mean["bakeoff"][i]
        if drift > 0.05:
            print(f"note: bakeoff's {what} medians differ by {drift:.0%} between passes")
    for i, what in ((0, "TTFT"), (1, "TPOT")):
        ratio = mean["bakeoff"][i] / mean["AIPerf"][i]
        verdict = "within" if 0.95 <= ratio <= 1.05 else "OUTSIDE"
        print(
            f"{what} p50 ratio bakeoff / AIPerf: {ratio:.3f} ({verdict} the 0.95-1.05 target)"
            + paired_interval([b[i] / a[i] for b, a in zip(*passes.values(), strict=True)])
        )
    sys.stdout.flush()


def paired_interval(ratios: list[float]) -> str:
    """How far the ratio can be trusted: each pass's bakeoff figure over the AIPerf
    figure measured right after it (drift falls on both alike), and a 95% Student-t
    interval of their mean, which says whether the passes' own spread allows a
    verdict on the 0.95-1.05 target at all."""
    if len(ratios) < 2:
        return ""
    from scipy import stats as scipy_stats

    a = np.asarray(ratios)
    half = scipy_stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a))
    shown = ", ".join(f"{r:.3f}" for r in a)
    mid = a.mean()
    return f"; per pass {shown}: mean {mid:.3f}, 95% CI {mid - half:.3f}-{mid + half:.3f}"


if __name__ == "__main__":
    main()
