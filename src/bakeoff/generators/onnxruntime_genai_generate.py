"""ONNX Runtime GenAI on the model folder bakeoff writes from a causal LM
(`bakeoff.transforms.genai_export`): `onnxruntime-genai` in FP32 or INT4
(MatMulNBits).

Greedy search (top-k 1, no sampling) token by token through GenAI's `Generator`,
each token reported as `generate_next_token` returns it. A batch of requests is
one generator with `batch_size` rows, the prompts right-padded with the pad token:
GenAI masks the pad tokens at the end of a row (read from the back), not those in
front. Perplexity comes from the same model: the logits of
every position after the whole text is appended (the export returns all of them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.generators import Batch, OnToken, eos_ids, summed_nll, until_end


class OrtGenaiGenerator:
    runtime = "onnxruntime-genai"

    def __init__(self, folder: Path, threads: int) -> None:
        import onnxruntime_genai as og

        self.og = og
        config = json.loads((folder / "genai_config.json").read_text())["model"]
        self.max_positions = int(config["context_length"])
        self.eos = eos_ids(config.get("eos_token_id"))
        self.pad = int(config.get("pad_token_id") or 0)
        genai_config = og.Config(str(folder))
        # The run's threads, whatever the folder was written with.
        genai_config.overlay(
            json.dumps(
                {
                    "model": {
                        "decoder": {
                            "session_options": {
                                "intra_op_num_threads": threads,
                                "inter_op_num_threads": 1,
                            }
                        }
                    }
                }
            )
        )
        genai_config.clear_providers()  # the CPU
        self.model = og.Model(genai_config)
        self.settings: dict[str, Any] = {
            "threads": threads,
            "interop_threads": 1,
            "onnxruntime_genai_version": og.__version__,
            "model_type": config["type"],
            "batching": "static batches: one generator of batch_size rows, right-padded",
        }

    def _fits(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )

    def _generator(self, rows: np.ndarray, max_new_tokens: int) -> Any:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(
            do_sample=False,
            top_k=1,
            batch_size=rows.shape[0],
            max_length=rows.shape[1] + max_new_tokens,
        )
        generator = self.og.Generator(self.model, params)
        generator.append_tokens(rows)
        return generator

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        self._fits(prompt, max_new_tokens)
        generator = self._generator(np.asarray([prompt], dtype=np.int32), max_new_tokens)
        out: list[int] = []
        while len(out) < max_new_tokens and not generator.is_done():
            generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
            if token in self.eos:
                break
            on_token(token)
            out.append(token)
        return out

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        for prompt in prompts:
            self._fits(prompt, max_new_tokens)
        width = max(len(p) for p in prompts)
        rows = np.asarray([list(p) + [self.pad] * (width - len(p)) for p in prompts], np.int32)
        start = time.perf_counter_ns()
        generator = self._generator(rows, max_new_tokens)
        steps: list[list[int]] = []
        first = 0
        while len(steps) < max_new_tokens and not generator.is_done():
            generator.generate_next_token()
            steps.append([int(t) for t in generator.get_next_tokens()])
            if len(steps) == 1:
                first = time.perf_counter_ns() - start
        first = first or time.perf_counter_ns() - start
        tokens = [until_end([step[i] for step in steps], self.eos) for i in range(len(prompts))]
        return Batch(tokens, [first] * len(prompts))

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        if len(tokens) < 2:
            return 0.0, 0
        generator = self._generator(np.asarray([tokens], dtype=np.int32), 1)
        logits = np.asarray(generator.get_output("logits"))[0, :-1]
        return summed_nll(logits, tokens[1:]), len(tokens) - 1


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> OrtGenaiGenerator:
    # `precision`: the file (or folder) given was built at it
    return OrtGenaiGenerator(folder, threads)
