"""llama.cpp on a tiny random GPT-2 folder, written as GGUF by bakeoff and quantized
by llama.cpp's own quantizer: at F32 it writes PyTorch's greedy tokens exactly.

llama-cpp-python compiles llama.cpp when it installs (minutes), so these tests run
under `make test-llama-cpp` (marker `llama_cpp`), not in make test."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bakeoff import generators
from bakeoff.generators import llama_server
from bakeoff.generators.arrivals import Arrival, poisson_schedule
from bakeoff.judge import generation as gen
from bakeoff.transforms import gguf_export
from extras import require_program
from tiny_gpt2 import PROMPTS, greedy, tiny_gpt2, with_tokenizer

pytestmark = pytest.mark.llama_cpp

if generators.availability("llama-cpp"):
    pytest.skip(str(generators.availability("llama-cpp")), allow_module_level=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_tokenizer(tiny_gpt2(tmp_path_factory.mktemp("gpt2"), vocab=320))


@pytest.fixture(scope="module")
def reference(folder: Path) -> tuple[generators.Generator, list[list[int]]]:
    torch_gen = generators.load("torch", folder, threads=1)
    return torch_gen, greedy(torch_gen)[0]


def test_llama_cpp_at_f32_writes_torchs_greedy_tokens(
    folder: Path, reference: tuple[generators.Generator, list[list[int]]], tmp_path: Path
) -> None:
    torch_gen, ref = reference
    path = gguf_export.write_gguf(folder, tmp_path / "f32.gguf", "f32")
    llama = generators.load("llama-cpp", path, threads=1)
    out, timings = greedy(llama)
    assert out == ref
    assert all(t.tokens == len(o) and t.ttft_ns > 0 for t, o in zip(timings, out, strict=True))
    # a second request with the same prompt prefills again (no KV-cache reuse)
    again, _ = greedy(llama)
    assert again == ref
    text = list(range(1, 60))
    assert llama.nll(text) == pytest.approx(torch_gen.nll(text), rel=1e-3)


@pytest.mark.parametrize("kind", ["q8_0", "q4_k_m"])
def test_llama_cpps_own_quantizer_makes_smaller_files_the_gate_judges(
    kind: str,
    folder: Path,
    reference: tuple[generators.Generator, list[list[int]]],
    tmp_path: Path,
) -> None:
    torch_gen, ref = reference
    f16 = gguf_export.write_gguf(folder, tmp_path / "f16.gguf", "f16")
    quantized = gguf_export.quantize(f16, tmp_path / f"{kind}.gguf", kind, threads=1)
    assert quantized.stat().st_size < f16.stat().st_size
    llama = generators.load("llama-cpp", quantized, threads=1)
    out, _ = greedy(llama)
    assert len(out) == len(PROMPTS)
    text = list(range(1, 60))
    q = gen.judge(ref, out, gen.perplexity(*torch_gen.nll(text)), gen.perplexity(*llama.nll(text)))
    assert 0.0 <= q.token_agreement <= 1.0 and q.perplexity > 0
    assert q.passed == (q.agreement_ok and q.perplexity_ok)
    assert ("rejected" in q.describe()) != q.passed


def test_an_unknown_quantization_is_named(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not 'q3'"):
        gguf_export.quantize(tmp_path / "x.gguf", tmp_path / "y.gguf", "q3", threads=1)


def test_a_prompt_past_the_models_positions_is_a_clear_error(folder: Path, tmp_path: Path) -> None:
    llama = generators.load("llama-cpp", gguf_export.write_gguf(folder, tmp_path / "m.gguf"), 1)
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        llama.generate([1] * 120, 16, lambda _t: None)


def test_requests_submitted_together_queue_one_after_another(
    folder: Path, reference: tuple[generators.Generator, list[list[int]]], tmp_path: Path
) -> None:
    """llama-cpp-python's Llama has no batching: a batch is answered request by request,
    each one's first token later than the one before it (it waited)."""
    _, ref = reference
    llama = generators.load(
        "llama-cpp", gguf_export.write_gguf(folder, tmp_path / "b.gguf", "f32"), 1
    )
    batch = llama.generate_batch(PROMPTS, 16)
    assert batch.tokens == ref
    assert batch.first_token_ns == sorted(batch.first_token_ns) and batch.first_token_ns[0] > 0
    assert "one after another" in llama.settings["batching"]


def _most_tasks_at_once(log: Path) -> int:
    """The most requests llama-server's slots held at once, from its log: a slot's
    `launch_slot_: id N | task T` to its `release: id N | task T`."""
    running: set[str] = set()
    most = 0
    for line in log.read_text(errors="replace").splitlines():
        task = re.search(r"(launch_slot_|release): id +\d+ \| task (\d+)", line)
        if task is None:
            continue
        if task.group(1) == "launch_slot_":
            running.add(task.group(2))
        else:
            running.discard(task.group(2))
        most = max(most, len(running))
    return most


def test_llama_servers_slots_answer_requests_as_they_arrive_several_at_once(
    folder: Path, reference: tuple[generators.Generator, list[list[int]]], tmp_path: Path
) -> None:
    """The server scenario's path for llama.cpp: its own server on the same GGUF file,
    whose slots decode the requests that have arrived together (llama-cpp-python's
    Llama answers them one after another)."""
    if llama_server.binary() is None:
        require_program(Path(sys.prefix) / "bin" / "llama-server", llama_server.INSTALL)
    _, ref = reference
    llama = generators.load(
        "llama-cpp", gguf_export.write_gguf(folder, tmp_path / "s.gguf", "f32"), 1
    )
    assert "llama.cpp's server, 8 slots" in llama.settings["server_batching"]
    recorded = llama.settings["llama_server"]
    assert recorded["prompt_cache"] is False and recorded["slots"] == 8
    assert recorded["version"] and "commit" in recorded["version"]  # llama-server --version
    serve = llama.serve  # type: ignore[attr-defined]
    burst = serve([Arrival(0, p) for p in PROMPTS * 2], 16)
    # every request answered, as long as torch's greedy answer to it
    assert sorted(s.tokens for s in burst) == sorted(len(r) for r in ref * 2)
    assert max(s.running for s in burst) > 1.5  # several in flight, as the client saw
    # and in the server's own slots at once, as its log says (one slot would say 1)
    assert _most_tasks_at_once(llama._server.log_path) > 1  # type: ignore[attr-defined]
    assert all(s.ttft_ns > 0 and s.last_ns >= s.first_ns for s in burst)
    arriving = serve(poisson_schedule(20.0, 12, PROMPTS, seed=0), 16)
    assert len(arriving) == 12 and all(s.arrived_ns >= 0 for s in arriving)
    llama._server.close()  # type: ignore[attr-defined]
    assert llama._server.proc.poll() is not None  # type: ignore[attr-defined]


KILLED_WORKER = """
import sys, time
from pathlib import Path
from bakeoff.generators.llama_server import LlamaServer
server = LlamaServer(Path(sys.argv[1]), Path(sys.argv[2]), 1, 128, Path(sys.argv[3]))
print(server.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_worker_leaves_no_llama_server_behind(folder: Path, tmp_path: Path) -> None:
    if llama_server.binary() is None:
        require_program(Path(sys.prefix) / "bin" / "llama-server", llama_server.INSTALL)
    gguf = gguf_export.write_gguf(folder, tmp_path / "k.gguf", "f32")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_WORKER,
            str(llama_server.binary()),
            str(gguf),
            str(tmp_path / "server.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    server_pid = int(worker.stdout.readline())
    os.kill(server_pid, 0)  # running
    worker.kill()  # as the orchestrator kills a worker past its timeout: no atexit
    worker.wait()
    ends = time.monotonic() + 15
    while time.monotonic() < ends:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(server_pid, os.WNOHANG)
        time.sleep(0.1)
    pytest.fail(f"llama-server {server_pid} outlived the worker that started it")
