"""OpenVINO GenAI on the stateful model folder bakeoff writes from a causal LM
(`bakeoff.transforms.genai_export`): `openvino-genai` in FP32, or with NNCF's INT8 /
INT4 weight compression.

`LLMPipeline` on the CPU, given token ids (no tokenizer model is needed), greedy
decoding; tokens are reported by a streamer as the pipeline writes them. The
inference precision is always f32: left alone, OpenVINO runs FP32 models in bf16
on CPUs that have it, and compressed weights are then multiplied in bf16 too. A
batch of requests is one left-padded `TokenizedInputs` (OpenVINO GenAI streams a
batch of one only, so a batch's first token is the pipeline's own time to first
token). Perplexity comes from the same IR compiled with the same properties,
the whole text in one inference with the state reset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.generators import Batch, OnToken, eos_ids, summed_nll, until_end

MODEL_FILE = "openvino_model.xml"


class OvGenaiGenerator:
    runtime = "openvino-genai"

    def __init__(self, folder: Path, threads: int) -> None:
        import openvino as ov
        import openvino_genai as ovg

        self.ov, self.ovg = ov, ovg
        self.properties = {
            "INFERENCE_PRECISION_HINT": "f32",
            "INFERENCE_NUM_THREADS": threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
        }
        self.folder = folder
        self.pipe = ovg.LLMPipeline(str(folder), "CPU", **self.properties)
        config = self.pipe.get_generation_config()
        self.eos = eos_ids(config.eos_token_id if config.eos_token_id >= 0 else None)
        self.eos |= {int(t) for t in getattr(config, "stop_token_ids", ()) or ()}
        self.pad = min(self.eos) if self.eos else 0
        self.max_positions = _max_positions(folder)
        self._scorer: Any = None
        self.settings: dict[str, Any] = {
            "openvino_genai_version": ovg.get_version(),
            "device": "CPU",
            **{k.lower(): v for k, v in self.properties.items()},
            "threads": threads,
            "batching": "static batches: one left-padded TokenizedInputs per batch",
            # Measured (openvino-genai 2026.4.1): its scheduler turns the stateful
            # model's ScaledDotProductAttention ops into paged attention, and this
            # folder, converted from bakeoff's ONNX export, has none.
            "server_batching": "static batches from a queue: OpenVINO GenAI's "
            "ContinuousBatchingPipeline refuses this folder (no ScaledDotProductAttention "
            "operation in the graph, which its SDPAToPagedAttention pass needs: the ONNX "
            "export's attention is MatMul and Softmax)",
        }

    def _config(self, max_new_tokens: int) -> Any:
        config = self.ovg.GenerationConfig()
        config.max_new_tokens = max_new_tokens
        config.do_sample = False
        config.num_beams = 1
        if self.eos:
            config.eos_token_id = min(self.eos)
            config.stop_token_ids = set(self.eos)
        return config

    def _fits(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        self._fits(prompt, max_new_tokens)
        eos = self.eos
        ovg = self.ovg

        class Streamer(ovg.StreamerBase):  # type: ignore[name-defined]
            def write(self, token: Any) -> Any:
                for t in token if isinstance(token, list) else [token]:
                    if int(t) not in eos:
                        on_token(int(t))
                return ovg.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        ids = self.ov.Tensor(np.asarray([prompt], dtype=np.int64))
        result = self.pipe.generate(ids, self._config(max_new_tokens), Streamer())
        return until_end(list(result.tokens[0]), eos)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        for prompt in prompts:
            self._fits(prompt, max_new_tokens)
        width = max(len(p) for p in prompts)
        ids = np.asarray([[self.pad] * (width - len(p)) + list(p) for p in prompts], np.int64)
        mask = np.asarray([[0] * (width - len(p)) + [1] * len(p) for p in prompts], np.int64)
        inputs = self.ovg.TokenizedInputs(self.ov.Tensor(ids), self.ov.Tensor(mask))
        start = time.perf_counter_ns()
        result = self.pipe.generate(inputs, self._config(max_new_tokens))
        done = time.perf_counter_ns() - start
        ttft_ms = float(result.perf_metrics.get_ttft().mean)
        first = int(ttft_ms * 1e6) if ttft_ms > 0 else done
        tokens = [until_end(list(row), self.eos) for row in result.tokens]
        return Batch(tokens, [first] * len(prompts))

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        if len(tokens) < 2:
            return 0.0, 0
        if self._scorer is None:
            core = self.ov.Core()
            compiled = core.compile_model(str(self.folder / MODEL_FILE), "CPU", self.properties)
            self._scorer = compiled.create_infer_request()
        request = self._scorer
        request.reset_state()
        n = len(tokens)
        outputs = request.infer(
            {
                "input_ids": np.asarray([tokens], dtype=np.int64),
                "attention_mask": np.ones((1, n), dtype=np.int64),
                "position_ids": np.arange(n, dtype=np.int64)[None, :],
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        logits = np.asarray(outputs["logits"])[0, :-1]
        return summed_nll(logits, tokens[1:]), n - 1


def _max_positions(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    return int(config.get("n_positions") or config.get("max_position_embeddings") or 2048)


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> OvGenaiGenerator:
    # `precision`: the file (or folder) given was built at it
    return OvGenaiGenerator(folder, threads)
