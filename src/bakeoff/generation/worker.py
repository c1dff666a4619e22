"""The worker side of generation: a `GenerateJob`'s build, load, first request and
quality pass, then its timed requests (run as
``python -m bakeoff.generation.worker FD``, through the loop every worker runs,
`trials.worker.serve`).

Each timed call is one greedy request on the next prompt, cycling through them
all; the engine makes a round whole passes over them (`calls_multiple`), so every
round times each prompt, short and long, alike. The figure the engine
times is the request's time per output token (TPOT); its time to first token
(TTFT), its tokens and its whole time go beside it in `Timed.extra`. The gate's
figures (greedy tokens on every prompt, summed NLL on the held-out text) come from
this very process, after the first request and before any timed one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bakeoff import generators
from bakeoff.generation.messages import JOBS, Arrivals, Concurrent, GenerateJob, GenerateSpec
from bakeoff.trials.jobs import Exit, Job, JobError, Measure, Peak, Timed, Warmup
from bakeoff.trials.memory import PeakMemory
from bakeoff.trials.worker import Handlers, answer_until_exit, send, serve


def model_file(spec: GenerateSpec) -> tuple[Path, float, dict[str, Any]]:
    """The file (or folder) the runtime loads, built first where it needs one, the
    seconds the build took here (0 when another worker of the run built it) and
    what the build applied (a quantizer's settings)."""
    started = time.perf_counter()
    if spec.runtime in ("onnxruntime-genai", "openvino-genai"):
        built = _genai_folder(spec)
        return Path(built["path"]), time.perf_counter() - started, built.get("settings", {})
    if spec.runtime != "llama-cpp":
        return Path(spec.folder), 0.0, {}
    from bakeoff.transforms import gguf_export

    out_dir = Path(spec.artifacts_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"model-{spec.precision}.gguf"
    if not target.exists():
        source = spec.precision if spec.precision in gguf_export.FLOAT_TYPES else "f16"
        base = out_dir / f"model-{source}.gguf"
        if not base.exists():
            _atomic(base, lambda tmp: gguf_export.write_gguf(Path(spec.folder), tmp, source))
        if target != base:
            _atomic(
                target,
                lambda tmp: gguf_export.quantize(base, tmp, spec.precision, spec.threads),
            )
    return target, time.perf_counter() - started, {}


def _genai_folder(spec: GenerateSpec) -> dict[str, Any]:
    """ONNX Runtime GenAI's or OpenVINO GenAI's model folder, built through the run's
    build steps: one ONNX export of the decoder feeds both runtimes (each step is
    built once per run, under a lock, and a failed one fails its dependents at once
    with the same reason)."""
    from bakeoff.transforms import cached_step, genai_export, ov_genai

    steps = str(Path(spec.artifacts_dir).parent)
    folder = Path(spec.folder)
    export = cached_step(steps, "decoder-onnx", lambda d: genai_export.decoder_onnx(folder, d))
    name = f"{spec.runtime}-{spec.precision}" + (f"-{spec.method}" if spec.method else "")
    calibration: list[list[int]] = []
    if spec.method:  # AWQ and GPTQ tune the weights to the workload's calibration text
        calibration = json.loads(Path(spec.inputs_path).read_text()).get("calibration") or []
    if spec.runtime == "onnxruntime-genai":
        return cached_step(
            steps,
            name,
            lambda d: genai_export.ort_genai_folder(
                export, spec.precision, spec.threads, d, spec.method, calibration
            ),
        )
    return cached_step(
        steps,
        name,
        lambda d: ov_genai.openvino_genai_folder(
            export, folder, spec.precision, d, spec.method, calibration
        ),
    )


def _atomic(target: Path, write: Callable[[Path], Any]) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, target)


class Generating:
    """A loaded generative runtime answering the trial engine's commands."""

    def __init__(self, gen: generators.Generator, spec: GenerateSpec, prompts: list[list[int]]):
        self.gen, self.spec, self.prompts = gen, spec, prompts
        self.memory = PeakMemory()
        self.clock: Callable[[], int] = time.perf_counter_ns
        self.next = 0  # the prompt the next request takes

    def request(self, prompt: list[int]) -> tuple[int, list[int]]:
        """One greedy request: (start ns, each output token's arrival ns)."""
        stamps: list[int] = []
        clock = self.clock
        start = clock()
        self.gen.generate(prompt, self.spec.max_new_tokens, lambda _t: stamps.append(clock()))
        return start, stamps

    def requests(self, n: int) -> Timed:
        tpot: list[int] = []
        ttft: list[int] = []
        tokens: list[int] = []
        total: list[int] = []
        block_start = self.clock()
        for _ in range(n):
            prompt = self.prompts[self.next % len(self.prompts)]
            self.next += 1
            start, stamps = self.request(prompt)
            if not stamps:  # the model ended its text at once: its answer came then
                stamps = [self.clock()]
                tokens.append(0)
            else:
                tokens.append(len(stamps))
            ttft.append(stamps[0] - start)
            total.append(stamps[-1] - start)
            # A one-token answer has no decode step: its TPOT is its TTFT's, the most
            # it can be, rather than a gap in the samples.
            per = (stamps[-1] - stamps[0]) // (len(stamps) - 1) if len(stamps) > 1 else ttft[-1]
            tpot.append(per)
        extra = {"ttft_ns": ttft, "tokens": tokens, "total_ns": total}
        return Timed(tpot, self.clock() - block_start, extra)

    def warm_up(self, cmd: Warmup) -> dict[str, Any]:
        """Requests until the warm-up's time and count are done; replies with each
        request's whole time (the engine sizes its rounds in requests from it, while
        the rounds time the tokens)."""
        lat: list[int] = []
        deadline = self.clock() + int(cmd.seconds * 1e9)
        # Every prompt once at least: a runtime that compiles per prompt length
        # (torch.compile) has done so before anything is kept.
        least = max(cmd.min_calls, len(self.prompts))
        while not lat or len(lat) < least or self.clock() < deadline:
            lat.append(self.requests(1).block_ns)
            if len(lat) >= max(cmd.max_calls, least):
                break
        return {"latency_ns": lat}

    def measure(self, cmd: Measure) -> dict[str, Any]:
        if cmd.settle:
            self.requests(cmd.settle)
        return self.requests(cmd.calls).to_json()

    def concurrent(self, cmd: Concurrent) -> dict[str, Any]:
        """Whole passes over the prompts in order, `concurrency` submitted together at a
        time (the last batch of a pass may be smaller)."""
        if cmd.concurrency < 1 or cmd.passes < 1:
            raise JobError(f"concurrency and passes must be at least 1, not {cmd}")
        ttft: list[int] = []
        tokens: list[int] = []
        batch_ns: list[int] = []
        block_start = self.clock()
        for _ in range(cmd.passes):
            for at in range(0, len(self.prompts), cmd.concurrency):
                started = self.clock()
                batch = self.gen.generate_batch(
                    self.prompts[at : at + cmd.concurrency], self.spec.max_new_tokens
                )
                batch_ns.append(self.clock() - started)
                ttft.extend(batch.first_token_ns)
                tokens.extend(len(t) for t in batch.tokens)
        extra = {"tokens": tokens, "batch_ns": batch_ns}
        return Timed(ttft, self.clock() - block_start, extra).to_json()

    def arrivals(self, cmd: Arrivals) -> dict[str, Any]:
        """Requests arriving over time, through the engine's scheduler where it has
        one, else a queue (static batches, or one at a time without batching)."""
        from bakeoff.generators import arrivals as arr

        if cmd.rate_per_s <= 0 or cmd.requests < 1 or cmd.max_batch < 1:
            raise JobError(f"a rate above 0, requests and max_batch of at least 1, not {cmd}")
        schedule = arr.poisson_schedule(cmd.rate_per_s, cmd.requests, self.prompts, cmd.seed)
        new = self.spec.max_new_tokens
        began = self.clock()
        serve = getattr(self.gen, "serve", None)
        if serve is not None:
            served = serve(schedule, new)
        elif str(self.gen.settings.get("batching", "")).startswith("none"):
            served = arr.one_at_a_time(schedule, self.gen.generate, new, self.clock)
        else:
            served = arr.queue_in_batches(
                schedule, self.gen.generate_batch, new, cmd.max_batch, self.clock
            )
        extra = {
            "tpot_ns": [s.tpot_ns for s in served],
            "tokens": [s.tokens for s in served],
            "arrived_ns": [s.arrived_ns for s in served],
            "last_ns": [s.last_ns for s in served],
            # Timed's figures are whole numbers: mean running requests in thousandths
            "running_milli": [round(s.running * 1000) for s in served],
        }
        return Timed([s.ttft_ns for s in served], self.clock() - began, extra).to_json()

    def peak(self, _cmd: Peak | Exit) -> dict[str, Any]:
        return {"peak_rss_mb": self.memory.mb()}

    def handlers(self) -> Handlers:
        return {
            Warmup: self.warm_up,
            Measure: self.measure,
            Concurrent: self.concurrent,
            Arrivals: self.arrivals,
            Peak: self.peak,
            Exit: self.peak,
        }


def progress_path(outputs_path: str | Path) -> Path:
    """Where a generation worker notes how far it got before its gate figures are
    written, one line each: `loaded`, `prompt N` as each prompt's request starts (the
    first request's too), `perplexity`. A worker that died (a crash, a hang killed at
    the timeout) leaves the prompt it died on as the last line: the reference's
    worker then runs again without that prompt (`bakeoff.generation.reference`)."""
    path = Path(outputs_path)
    return path.with_name(path.stem + ".progress")


class _Progress:
    def __init__(self, spec: GenerateSpec) -> None:
        self.path = progress_path(spec.outputs_path)
        self.path.write_text("")

    def note(self, line: str) -> None:
        # Flushed to the OS at once: it outlives a process that is killed.
        with self.path.open("a") as f:
            f.write(line + "\n")


def _quality(
    gen: generators.Generator, spec: GenerateSpec, inputs: dict[str, Any], progress: _Progress
) -> None:
    """Greedy tokens on every prompt and the held-out text's NLL, for the gate."""
    tokens = []
    for i, prompt in enumerate(inputs["prompts"]):
        progress.note(f"prompt {i}")
        tokens.append(gen.generate(prompt, spec.max_new_tokens, lambda _t: None))
    progress.note("perplexity")
    nll, predicted = 0.0, 0
    for passage in inputs["text"]:
        value, n = gen.nll(passage)
        nll, predicted = nll + value, predicted + n
    Path(spec.outputs_path).write_text(
        json.dumps({"tokens": tokens, "nll": nll, "predicted": predicted})
    )


def start_generating(job: GenerateJob, started: float) -> tuple[dict[str, Any], Generating]:
    """Built, loaded, its first request timed and its gate figures saved: the ready
    message, and what answers the engine's commands after it."""
    spec = job.generate
    inputs = json.loads(Path(spec.inputs_path).read_text())
    path, build_s, built = model_file(spec)  # a StepFailed is the worker's reason
    gen = generators.load(spec.runtime, path, spec.threads, spec.precision)
    progress = _Progress(spec)
    progress.note("loaded")
    # Process start (imports included) to loaded, the build apart: a deployment
    # ships the built file.
    load_s = time.perf_counter() - started - build_s
    generating = Generating(gen, spec, inputs["prompts"])
    progress.note("prompt 0")
    start, stamps = generating.request(inputs["prompts"][0])
    first_token_s = (stamps[0] - start) / 1e9 if stamps else None
    first_request_s = ((stamps[-1] if stamps else start) - start) / 1e9
    generating.memory.loaded()
    _quality(gen, spec, inputs, progress)
    size = path.stat().st_size if path.is_file() else _folder_bytes(path)
    # A runtime that quantizes as it loads (MLX) holds other weights than the files'.
    size = getattr(gen, "weights_bytes", None) or size
    ready = {
        "ok": True,
        "event": "ready",
        "load_s": load_s,
        "first_call_s": first_request_s,
        "settings": {"runtime": spec.runtime, **gen.settings, **built},
        "model_bytes": size,
        "pid": os.getpid(),
        "worker": {
            "build_s": build_s,
            "first_token_s": first_token_s,
            "peak_memory": "the worker's peak resident memory from its start: the model, "
            "its KV cache and the runtime",
        },
    }
    return ready, generating


# The files of a model folder that hold the model: Hugging Face weights, ONNX and its
# external data, an OpenVINO IR (the tokenizer and configurations are small).
MODEL_SUFFIXES = (".safetensors", ".onnx", ".data", ".xml", ".bin")


def _folder_bytes(folder: Path) -> int:
    """A model folder's model files (what a deployment ships)."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in MODEL_SUFFIXES)


def run(conn: Connection, job: Job, started: float) -> None:
    if not isinstance(job, GenerateJob):
        raise JobError(f"a generation worker does not run {job.kind!r} jobs")
    ready, generating = start_generating(job, started)
    send(conn, ready)
    answer_until_exit(conn, generating.handlers())


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), JOBS, run))
