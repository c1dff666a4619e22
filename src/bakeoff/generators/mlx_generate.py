"""MLX through mlx-lm, on MLX's CPU backend here (`mlx[cpu]`; its CUDA backend on an
NVIDIA GPU): `mlx` at fp32 (the folder's weights as they are), bf16, and mlx-lm's
own 8-bit and 4-bit affine quantization (`quantize_model`, groups of 64 where the
layers allow, else 32).

mlx-lm reads the Hugging Face folder itself (`load_model`: safetensors and
config.json; no tokenizer, since bakeoff gives token ids). Greedy decoding is
mlx-lm's `generate_step` with its argmax sampler and a fresh KV cache per request;
MLX evaluates lazily, so each token is read back (`.item()`) before it is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import Batch, OnToken, eos_ids, one_after_another, summed_nll

# precision -> mlx-lm's quantization bits (None: not quantized)
BITS = {"fp32": None, "bf16": None, "int8": 8, "int4": 4}


class MlxGenerator:
    runtime = "mlx"

    def __init__(self, folder: Path, precision: str, threads: int) -> None:
        import mlx.core as mx
        from mlx_lm.utils import load_model, quantize_model

        self.mx = mx
        model, config = load_model(
            folder, model_config=_missing_keys(folder), get_model_classes=_classes
        )
        settings: dict[str, Any] = {
            "mlx_device": str(mx.default_device()),
            "threads": threads,
            "batching": "none: requests submitted together are answered one after another",
        }
        if precision == "bf16":
            from bakeoff.hardware import native_flags

            model.set_dtype(mx.bfloat16)
            settings["dtype"] = "bfloat16"
            settings["bf16"] = (
                "native"
                if native_flags("bf16")
                else "emulated: this CPU has no native BF16 arithmetic"
            )
        elif (bits := BITS.get(precision)) is not None:
            model, config, group = _quantized(model, config, bits, quantize_model)
            settings["quantization"] = {"bits": bits, "group_size": group}
        self.model = model
        # What it holds once loaded (quantized in memory): the model's size, not the
        # folder's, which stays FP32.
        from mlx.utils import tree_flatten

        leaves: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
        self.weights_bytes = sum(int(v.nbytes) for _, v in leaves)
        self.max_positions = int(
            config.get("n_positions") or config.get("max_position_embeddings") or 0
        )
        self.eos = eos_ids(config.get("eos_token_id"))
        self.settings = settings

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        from mlx_lm.generate import generate_step
        from mlx_lm.models.cache import make_prompt_cache

        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )
        out: list[int] = []
        steps = generate_step(
            self.mx.array(list(prompt)),
            self.model,
            max_tokens=max_new_tokens,
            prompt_cache=make_prompt_cache(self.model),  # no reuse across requests
        )
        for token, _ in steps:
            value = int(token.item()) if hasattr(token, "item") else int(token)  # type: ignore[arg-type]
            if value in self.eos:
                break
            on_token(value)
            out.append(value)
            if len(out) >= max_new_tokens:
                break
        return out

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        return one_after_another(self.generate, prompts, max_new_tokens)

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        if len(tokens) < 2:
            return 0.0, 0
        mx = self.mx
        logits = self.model(mx.array([list(tokens)]))[0, :-1].astype(mx.float32)
        return summed_nll(logits.tolist(), tokens[1:]), len(tokens) - 1


def _missing_keys(folder: Path) -> dict[str, Any]:
    """What mlx-lm's model classes require that a current transformers config leaves
    out: GPT-2's `n_ctx`, which transformers 5 no longer writes (it is `n_positions`)."""
    import json

    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") == "gpt2" and "n_ctx" not in config:
        return {"n_ctx": config.get("n_positions", 1024)}
    return {}


def _classes(config: dict) -> tuple[Any, Any]:
    """mlx-lm's model classes for the config; its GPT-2 reads the original hub layout
    (`h.0...`), while transformers' GPT2LMHeadModel writes `transformer.h.0...` and a
    tied `lm_head.weight`: those are mapped onto it."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    if config.get("model_type") != "gpt2":
        return model_class, args_class

    class HfGpt2(model_class):  # type: ignore[misc, valid-type]
        def sanitize(self, weights: dict) -> dict:
            plain = {
                k.removeprefix("transformer."): v
                for k, v in weights.items()
                if k != "lm_head.weight"
            }
            return super().sanitize(plain)

    return HfGpt2, args_class


def _quantized(model: Any, config: dict, bits: int, quantize_model: Any) -> tuple[Any, dict, int]:
    """mlx-lm's quantization in groups of 64 (its default), or 32 where a layer's
    width does not divide by 64."""
    try:
        model, config = quantize_model(model, config, group_size=64, bits=bits)
        return model, config, 64
    except ValueError:
        model, config = quantize_model(model, config, group_size=32, bits=bits)
        return model, config, 32


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> MlxGenerator:
    return MlxGenerator(folder, precision, threads)
