"""PyTorch generation through Hugging Face's own `generate`: `torch` (eager, a
dynamic KV cache: the reference) and `torch-compile` (a static KV cache and the
model's forward under `torch.compile`, as Hugging Face's guide to fast generation
sets it up; the compile happens on the first calls, which the caller times apart).

Greedy decoding, the folder's own weights, no code from the folder (remote code
is refused). Output tokens are reported by a streamer that `generate` calls as
each token is chosen, so their timestamps are the runtime's own.

In the server scenario, eager torch serves requests through transformers' own
scheduler, its continuous batching (`init_continuous_batching`: paged attention,
requests admitted and decoded together step by step), each added as it arrives;
its tokens are stamped by transformers as they are chosen (`record_timestamps`).
torch-compile, whose forward is compiled for `generate`'s static cache, is fed by
the queue of static batches.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import Batch, OnToken, eos_ids, until_end
from bakeoff.generators.arrivals import Arrival, Served, mean_in_flight, wait_until

# transformers' continuous batching: the KV cache's page size (tokens) and how many
# requests one step may hold; stated, since its own defaults size a GPU's memory.
CB_PAGE_SIZE = 16
CB_MAX_REQUESTS = 64


def _threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)


class _Streamer:
    """`generate`'s streamer: the first `put` is the prompts, each later one the
    tokens just chosen, one per sequence (`on_step` gets them as a list)."""

    def __init__(self, on_step: Callable[[list[int]], None]) -> None:
        self.on_step = on_step
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.on_step([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        pass


class TorchGenerator:
    def __init__(self, runtime: str, model: Any, max_positions: int, threads: int) -> None:
        self.runtime = runtime
        self.model = model
        self.max_positions = max_positions
        self.eos = eos_ids(model.generation_config.eos_token_id)
        self.pad = min(self.eos) if self.eos else 0  # a batch's padding: never attended to
        self.settings: dict[str, Any] = {
            "threads": threads,
            "interop_threads": 1,
            "cache": "static" if runtime == "torch-compile" else "dynamic",
            "batching": "static batches: the prompts left-padded to the longest",
        }
        self._manager: Any = None
        self._sends = 0
        if runtime == "torch":
            self.serve = self._serve_continuously
            self.settings["server_batching"] = (
                "continuous batching: transformers' ContinuousBatchingManager (paged "
                f"attention, pages of {CB_PAGE_SIZE} tokens, at most {CB_MAX_REQUESTS} "
                "requests a step)"
            )

    def _fits(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )

    def _generate(self, ids: Any, mask: Any, max_new_tokens: int, streamer: _Streamer) -> Any:
        import torch

        with torch.inference_mode():
            return self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                streamer=streamer,
                pad_token_id=self.pad,
            )

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        import torch

        self._fits(prompt, max_new_tokens)
        ids = torch.tensor([list(prompt)], dtype=torch.long)

        def each(step: list[int]) -> None:
            on_token(step[0])

        out = self._generate(ids, torch.ones_like(ids), max_new_tokens, _Streamer(each))
        return until_end(out[0, len(prompt) :].tolist(), self.eos)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        import torch

        for prompt in prompts:
            self._fits(prompt, max_new_tokens)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        first: list[int] = []
        start = time.perf_counter_ns()

        def each(_step: list[int]) -> None:
            if not first:
                first.append(time.perf_counter_ns() - start)

        out = self._generate(ids, mask, max_new_tokens, _Streamer(each))
        done = time.perf_counter_ns() - start
        tokens = [until_end(row[width:].tolist(), self.eos) for row in out]
        # Every sequence of a static batch gets its first token at the same step.
        return Batch(tokens, [first[0] if first else done] * len(prompts))

    def _continuous_manager(self, max_new_tokens: int, warm_prompt: Sequence[int]) -> Any:
        """transformers' continuous-batching manager, started once for this worker
        and warmed by one request (its cache and first step are set up then, not in
        the first timed request); stopped when the worker exits."""
        import atexit

        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        if self._manager is not None:
            return self._manager
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=sorted(self.eos) or None,
            pad_token_id=self.pad,
        )
        # pages enough for every request at the model's full length, no more: left
        # to size itself, the cache takes a share of the machine's memory (a 28 s
        # start for a 2-layer model here)
        pages = -(-CB_MAX_REQUESTS * self.max_positions // CB_PAGE_SIZE)
        batching = ContinuousBatchingConfig(
            page_size=CB_PAGE_SIZE, max_requests_per_batch=CB_MAX_REQUESTS, num_blocks=pages
        )
        manager = self.model.init_continuous_batching(config, batching)
        manager.start()
        atexit.register(manager.stop, block=True)
        self._manager = manager
        manager.add_request(list(warm_prompt), "warm-up", max_new_tokens)
        self._results(manager, {"warm-up"})
        return manager

    @staticmethod
    def _results(manager: Any, ids: set[str]) -> dict[str, Any]:
        outputs: dict[str, Any] = {}
        while len(outputs) < len(ids):
            out = manager.get_result(timeout=1.0)
            if out is None and not manager.is_running():
                raise RuntimeError("transformers' continuous batching stopped early")
            if out is not None and out.is_finished() and out.request_id in ids:
                if out.error:
                    raise RuntimeError(f"request {out.request_id}: {out.error}")
                outputs[out.request_id] = out
        return outputs

    def _serve_continuously(self, schedule: Sequence[Arrival], max_new_tokens: int) -> list[Served]:
        """Requests as they arrive, through transformers' continuous batching: each
        added to its manager when its time comes; the manager's own thread admits
        and decodes them, stamping each token as it is chosen."""
        for arrival in schedule:
            self._fits(arrival.prompt, max_new_tokens)
        manager = self._continuous_manager(max_new_tokens, schedule[0].prompt)
        clock = time.perf_counter_ns
        self._sends += 1
        ids = [f"s{self._sends}-{i}" for i in range(len(schedule))]
        start = clock()
        for rid, arrival in zip(ids, schedule, strict=True):
            wait_until(clock, start, arrival.at_ns)
            manager.add_request(list(arrival.prompt), rid, max_new_tokens, record_timestamps=True)
        outputs = self._results(manager, set(ids))
        spans = []  # (arrival, first, last, tokens) per request
        for rid, arrival in zip(ids, schedule, strict=True):
            out = outputs[rid]
            tokens = until_end(out.generated_tokens, self.eos)
            stamps = [int(t * 1e9) - start for t in out.timestamps or []]
            if not stamps:  # nothing stamped: its answer came when it finished
                stamps = [int(out.lifespan[1] * 1e9) - start]
            # its last token's stamp (an end-of-text after it is stamped too, not counted)
            last = stamps[min(max(len(tokens), 1), len(stamps)) - 1]
            spans.append((arrival.at_ns, stamps[0], last, len(tokens)))
        # transformers reports no batch: the requests' overlap, arrival to last token
        running = mean_in_flight([(a, last) for a, _, last, _ in spans])
        return [Served(*span, r) for span, r in zip(spans, running, strict=True)]

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        import torch

        if len(tokens) < 2:
            return 0.0, 0
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.inference_mode():
            # The class's eager forward even for torch-compile (whose instance forward is
            # compiled for generate's static cache): the same weights, no recompiles.
            forward = type(self.model).forward
            logits = forward(self.model, input_ids=ids, use_cache=False).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
        return float(nll), len(tokens) - 1


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> TorchGenerator:
    # `precision`: the file (or folder) given was built at it
    import torch
    from transformers import AutoModelForCausalLM

    _threads(threads)
    model = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, trust_remote_code=False, dtype=torch.float32
    ).eval()
    max_positions = int(
        getattr(model.config, "n_positions", None)
        or getattr(model.config, "max_position_embeddings", 0)
        or 2048
    )
    if runtime == "torch-compile":
        model.generation_config.cache_implementation = "static"
        # Shapes as torch.compile decides them: the prefill is compiled again for a
        # second prompt length, then with a dynamic length; each decode step has one.
        model.forward = torch.compile(model.forward)
    return TorchGenerator(runtime, model, max_positions, threads)
