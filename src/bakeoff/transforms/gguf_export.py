"""A Hugging Face GPT-2 folder as a GGUF file for llama.cpp, written with the `gguf`
package (llama.cpp's own Python writer), then quantized by llama.cpp's own
quantizer through llama-cpp-python.

The writer does what llama.cpp's `convert_hf_to_gguf.py` does for GPT-2, which is
not shipped in any package: the names through gguf's own tensor-name map, the
Conv1D weights (stored input-major by Hugging Face) transposed to output-major,
the tied output head written from the token embedding, and the byte-level BPE
tokenizer's vocabulary and merges from the folder's `tokenizer.json`. Only
GPT-2 is mapped so far: another architecture is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

# Quantizations llama.cpp's quantizer makes from an F16/F32 file: the names users
# know, and llama.cpp's file-type numbers (llama.h's LLAMA_FTYPE_MOSTLY_*).
QUANTIZED_TYPES = {"q8_0": 7, "q4_k_m": 15}
FLOAT_TYPES = ("f32", "f16")
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class GgufUnsupported(ValueError):
    """The folder cannot be written as GGUF here; the message says why."""


def _config(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text())
    architectures = config.get("architectures") or [config.get("model_type", "?")]
    if config.get("model_type") != "gpt2":
        raise GgufUnsupported(
            f"GGUF export maps GPT-2 folders only; this one is {architectures[0]}"
        )
    return dict(config)


def _tokenizer(folder: Path) -> tuple[list[str], list[str], set[int]]:
    """(tokens by id, merges as 'a b', the ids of special tokens)."""
    path = folder / "tokenizer.json"
    if not path.exists():
        raise GgufUnsupported(f"{folder} has no tokenizer.json (a fast BPE tokenizer)")
    doc = json.loads(path.read_text(encoding="utf-8"))
    model = doc["model"]
    if model.get("type") != "BPE":
        raise GgufUnsupported(f"GGUF's gpt2 tokenizer needs BPE, not {model.get('type')}")
    vocab: dict[str, int] = dict(model["vocab"])
    special = {int(t["id"]) for t in doc.get("added_tokens", [])}
    for t in doc.get("added_tokens", []):
        vocab[t["content"]] = int(t["id"])
    tokens = [""] * (max(vocab.values()) + 1)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, merges, special


def write_gguf(folder: Path, out: Path, precision: str = "f32") -> Path:
    """Write `folder`'s model as GGUF at `out` in F32 or F16."""
    import gguf
    from safetensors.numpy import load_file

    if precision not in FLOAT_TYPES:
        raise ValueError(f"write_gguf writes {' or '.join(FLOAT_TYPES)}, not {precision!r}")
    config = _config(folder)
    weights_file = folder / "model.safetensors"
    if not weights_file.exists():
        raise GgufUnsupported(f"{folder} has no model.safetensors (sharded or .bin weights)")
    weights = load_file(str(weights_file))
    tokens, merges, special = _tokenizer(folder)
    vocab_size = int(config["vocab_size"])
    if len(tokens) > vocab_size:
        raise GgufUnsupported(
            f"the tokenizer has {len(tokens)} tokens, the model's embedding {vocab_size}"
        )
    # Rows of the embedding no token uses (a vocabulary rounded up): placeholders, as
    # llama.cpp's converter writes them, since llama.cpp wants one token per row.
    unused = set(range(len(tokens), vocab_size))
    tokens += [f"[PAD{i}]" for i in sorted(unused)]
    n_layer = int(config["n_layer"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT2, n_layer)
    writer = gguf.GGUFWriter(str(out), "gpt2")
    writer.add_context_length(int(config["n_positions"]))
    writer.add_embedding_length(int(config["n_embd"]))
    writer.add_feed_forward_length(int(config.get("n_inner") or 4 * config["n_embd"]))
    writer.add_block_count(n_layer)
    writer.add_head_count(int(config["n_head"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_epsilon", 1e-5)))
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if precision == "f32" else gguf.LlamaFileType.MOSTLY_F16
    )
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    kinds = dict.fromkeys(special, gguf.TokenType.CONTROL)
    kinds.update(dict.fromkeys(unused, gguf.TokenType.UNUSED))
    writer.add_token_types([kinds.get(i, gguf.TokenType.NORMAL) for i in range(vocab_size)])
    writer.add_token_merges(merges)
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(int(config["bos_token_id"]))
    if config.get("eos_token_id") is not None:
        writer.add_eos_token_id(int(config["eos_token_id"]))
    writer.add_add_bos_token(False)

    has_head = "lm_head.weight" in weights
    for hf_name, array in weights.items():
        name = hf_name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # causal-mask buffers, not weights
        if name == "lm_head.weight":
            target = "output.weight"
        else:
            mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if mapped is None:
                raise GgufUnsupported(f"no GGUF name for the GPT-2 tensor {hf_name}")
            target = mapped
        data = array.astype(np.float32)
        if name.endswith(_CONV1D):
            data = np.ascontiguousarray(data.T)
        # Norms and biases stay F32, as llama.cpp's converter keeps them.
        if precision == "f16" and data.ndim == 2:
            data = data.astype(np.float16)
        writer.add_tensor(target, data)
        if name == "wte.weight" and not has_head:  # tied head: llama.cpp wants its own
            writer.add_tensor("output.weight", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def quantize(source: Path, out: Path, kind: str, threads: int) -> Path:
    """llama.cpp's own quantizer: `source` (F16/F32 GGUF) to `kind` at `out`."""
    import llama_cpp

    if kind not in QUANTIZED_TYPES:
        raise ValueError(f"quantize makes {', '.join(QUANTIZED_TYPES)}, not {kind!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTIZED_TYPES[kind]
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(
        str(source).encode(), str(out).encode(), llama_cpp.byref(params)
    )
    if status != 0 or not out.exists():
        raise RuntimeError(f"llama.cpp's quantizer failed making {kind} (status {status})")
    return out
