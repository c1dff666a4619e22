"""A Hugging Face causal-LM folder as the model folders ONNX Runtime GenAI and
OpenVINO GenAI load, built by bakeoff from one ONNX export.

Neither runtime's own exporter can be used here: ONNX Runtime GenAI's model
builder (0.18) takes Llama-style architectures (no GPT-2), and OpenVINO GenAI's
models come from optimum-intel, whose 2.2 release does not install beside torch
2.13.0. Both runtimes load any decoder that follows their conventions, so bakeoff
writes one:

- `decoder_onnx`: the model's forward with its KV cache, exported by torch's
  dynamo exporter: inputs `input_ids`, `attention_mask`, `position_ids` and
  `past_key_values.<layer>.key|value`; outputs `logits` (every position) and
  `present.<layer>.key|value`, batch and lengths dynamic. These are the names
  ONNX Runtime GenAI's generic `decoder` model type reads from `genai_config.json`.
- `ort_genai_folder`: that file and its `genai_config.json` (greedy search); INT4 is
  ONNX Runtime's own MatMulNBits quantizer (blockwise, symmetric) over every
  weight MatMul, after the Gemm nodes the exporter writes are split into MatMul +
  Add and a tied output head gets a weight of its own (the quantizer takes constant
  MatMul weights only); round-to-nearest, or GPTQ on calibration text.
- `ov_genai.openvino_genai_folder`: the OpenVINO GenAI folder, from the same export.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.transforms import StepFailed, step_failed

INT4_BLOCK = 32  # weights per INT4 block: divides the widths of small models too
ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class DecoderFacts:
    """What the runtimes' configurations need to know of the model."""

    layers: int
    heads: int
    kv_heads: int
    head_size: int
    hidden: int
    vocab: int
    context: int
    bos: int | None
    eos: int | list[int] | None
    pad: int | None


def decoder_facts(folder: Path) -> DecoderFacts:
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    try:
        generation = GenerationConfig.from_pretrained(folder, local_files_only=True)
    except OSError:  # no generation_config.json: config.json says it
        generation = GenerationConfig.from_model_config(config)
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    eos = generation.eos_token_id
    pad = generation.pad_token_id
    first_eos = eos[0] if isinstance(eos, list) and eos else eos
    return DecoderFacts(
        layers=int(config.num_hidden_layers),
        heads=heads,
        kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
        head_size=int(getattr(config, "head_dim", None) or hidden // heads),
        hidden=hidden,
        vocab=int(config.vocab_size),
        context=int(
            getattr(config, "n_positions", None)
            or getattr(config, "max_position_embeddings", None)
            or 2048
        ),
        bos=generation.bos_token_id,
        eos=eos,
        pad=pad if pad is not None else first_eos,  # a greedy batch pads with end-of-text
    )


def input_names(layers: int) -> list[str]:
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids", *past]


def output_names(layers: int) -> list[str]:
    return ["logits", *(f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value"))]


def decoder_onnx(folder: Path, out_dir: Path) -> dict[str, Any]:
    """The causal LM with its KV cache as `out_dir/model.onnx` (see the module's text)."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    facts = decoder_facts(folder)
    model = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, trust_remote_code=False, dtype=torch.float32
    ).eval()
    _conv1d_as_linear(model)
    layers = facts.layers

    class WithCache(torch.nn.Module):
        """The model's forward on the cache as flat tensors, in and out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, past: list[Any]
        ) -> tuple[Any, ...]:
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
            present: list[Any] = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    # Example shapes with every axis distinct, so no two are taken for one.
    batch, new, past_len = 2, 5, 3
    ids = torch.randint(0, facts.vocab, (batch, new))
    mask = torch.ones(batch, past_len + new, dtype=torch.long)
    positions = torch.arange(past_len, past_len + new).expand(batch, new)
    past = [
        torch.zeros(batch, facts.kv_heads, past_len, facts.head_size) for _ in range(2 * layers)
    ]
    b, s = torch.export.Dim("batch"), torch.export.Dim("sequence")
    total, p = torch.export.Dim("total_sequence"), torch.export.Dim("past_sequence")
    dynamic = {
        "input_ids": {0: b, 1: s},
        "attention_mask": {0: b, 1: total},
        "position_ids": {0: b, 1: s},
        "past": [{0: b, 2: p} for _ in range(2 * layers)],
    }
    path = out_dir / ONNX_FILE
    try:
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(
                WithCache(),
                (ids, mask, positions, past),
                str(path),
                input_names=input_names(layers),
                output_names=output_names(layers),
                dynamic_shapes=dynamic,
                dynamo=True,
                external_data=_needs_external_data(model),
            )
    except Exception as exc:
        raise step_failed(
            "torch.onnx.export(dynamo=True) of the model with its KV cache",
            exc,
            "ONNX Runtime GenAI and OpenVINO GenAI need this export; torch and llama-cpp do not",
        ) from exc
    return {"path": str(path), "facts": facts.__dict__}


def _conv1d_as_linear(model: Any) -> None:
    """GPT-2's Conv1D layers as `nn.Linear` (its weight transposed): the same
    product, exported as one MatMul on the 3-D activations where Conv1D flattens them
    first (Reshape, MatMul, Reshape). NNCF's AWQ finds the layers it scales by the
    activation right before their MatMul, which the Reshape hid."""
    import torch
    from transformers.pytorch_utils import Conv1D

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, Conv1D):
                continue
            fan_in, fan_out = child.weight.shape
            linear = torch.nn.Linear(fan_in, fan_out, dtype=child.weight.dtype)
            with torch.no_grad():
                linear.weight.copy_(child.weight.t())
                linear.bias.copy_(child.bias)
            setattr(parent, name, linear)


def _needs_external_data(model: Any) -> bool:
    # ONNX's protobuf holds 2 GB at most; smaller models stay one file.
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    return bool(size > 1.8e9)


def genai_config(facts: DecoderFacts, threads: int) -> dict[str, Any]:
    """ONNX Runtime GenAI's `genai_config.json` for the export: the generic `decoder`
    type, greedy search, the run's threads."""
    layers = facts.layers
    return {
        "model": {
            "type": "decoder",
            "bos_token_id": facts.bos,
            "eos_token_id": facts.eos,
            "pad_token_id": facts.pad,
            "context_length": facts.context,
            "vocab_size": facts.vocab,
            "decoder": {
                "filename": ONNX_FILE,
                "session_options": {
                    "log_id": "bakeoff",
                    "intra_op_num_threads": threads,
                    "inter_op_num_threads": 1,
                    "provider_options": [],
                },
                "head_size": facts.head_size,
                "hidden_size": facts.hidden,
                "num_attention_heads": facts.heads,
                "num_key_value_heads": facts.kv_heads,
                "num_hidden_layers": layers,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        "search": {
            "do_sample": False,
            "num_beams": 1,
            "max_length": facts.context,
            "past_present_share_buffer": False,
            "top_k": 1,
        },
    }


def ort_genai_folder(
    export: dict[str, Any],
    precision: str,
    threads: int,
    out_dir: Path,
    method: str = "",
    calibration: Sequence[Sequence[int]] = (),
) -> dict[str, Any]:
    """`out_dir` as an ONNX Runtime GenAI model folder at `precision` (fp32 | int4);
    INT4 round-to-nearest, or by `method` "gptq" (ONNX Runtime's GPTQ, run on the
    `calibration` token ids)."""
    import onnx

    source = Path(export["path"])
    facts = DecoderFacts(**export["facts"])
    settings: dict[str, Any] = {"model_type": "decoder", "exported_by": "bakeoff"}
    if method and (precision, method) != ("int4", "gptq"):
        raise StepFailed(f"onnxruntime-genai runs GPTQ at int4 only, not {method} at {precision}")
    if precision == "fp32":
        for f in source.parent.iterdir():
            if f.suffix in (".onnx", ".data"):
                shutil.copy2(f, out_dir / f.name)
    elif precision == "int4":
        model = onnx.load(str(source))
        split = _matmul_weights(model)
        samples = [prefill_inputs(ids, facts) for ids in calibration] if method else None
        settings["quantization"] = {
            **_int4_matmul_nbits(model, out_dir / ONNX_FILE, samples),
            "gemm_split": split["gemm"],
            "transposed_weights": split["transposed"],
        }
    else:
        raise StepFailed(f"onnxruntime-genai runs fp32 or int4 here, not {precision}")
    (out_dir / "genai_config.json").write_text(json.dumps(genai_config(facts, threads), indent=1))
    return {"path": str(out_dir), "settings": settings}


def _matmul_weights(model: Any) -> dict[str, int]:
    """Rewrite the graph so every weight multiply is a MatMul by a constant: a plain
    Gemm (no transposes, alpha = beta = 1) becomes MatMul + Add, and a MatMul whose
    weight is Transpose(constant) (a tied output head) gets the transposed constant."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    counts = {"gemm": 0, "transposed": 0}
    nodes = []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = all(attrs.get(k, d) == d for k, d in (("transA", 0), ("transB", 0)))
        plain = plain and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        if node.op_type == "Gemm" and plain and node.input[1] in inits:
            product = f"{node.output[0]}_matmul"
            nodes.append(
                helper.make_node("MatMul", node.input[:2], [product], name=f"{node.name}_matmul")
            )
            if len(node.input) > 2 and node.input[2]:
                nodes.append(
                    helper.make_node(
                        "Add", [product, node.input[2]], node.output, name=f"{node.name}_bias"
                    )
                )
            else:
                nodes.append(helper.make_node("Identity", [product], node.output, name=node.name))
            counts["gemm"] += 1
            continue
        if node.op_type == "MatMul" and node.input[1] in producers:
            t = producers[node.input[1]]
            perm = [helper.get_attribute_value(a) for a in t.attribute if a.name == "perm"]
            if t.op_type == "Transpose" and t.input[0] in inits and perm in ([], [[1, 0]]):
                weight = numpy_helper.to_array(inits[t.input[0]])
                name = f"{t.input[0]}_transposed"
                if name not in inits:
                    inits[name] = numpy_helper.from_array(np.ascontiguousarray(weight.T), name)
                    graph.initializer.append(inits[name])
                node.input[1] = name
                counts["transposed"] += 1
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return counts


class _Samples:
    """ONNX Runtime's calibration data reader over fixed input dicts; the GPTQ
    quantizer copies it before each pass, and each copy starts from the first."""

    def __init__(self, samples: list[dict[str, np.ndarray]]) -> None:
        self.samples = samples
        self._next = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._next, None)

    def __iter__(self) -> Any:
        return iter(self.samples)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Samples:
        return _Samples(self.samples)


def _int4_matmul_nbits(
    model: Any, path: Path, samples: list[dict[str, np.ndarray]] | None = None
) -> dict[str, Any]:
    """INT4 MatMulNBits weights, round-to-nearest or, given calibration `samples`
    (the decoder's inputs), by ONNX Runtime's GPTQ (its copy of Intel Neural
    Compressor's), each layer's rounding error corrected on their activations."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        GPTQWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    # The quantizer logs every node it visits at INFO.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    gptq = GPTQWeightOnlyQuantConfig(_Samples(samples)) if samples else None
    try:
        quantizer = MatMulNBitsQuantizer(
            model,
            bits=4,
            block_size=INT4_BLOCK,
            is_symmetric=True,
            accuracy_level=4,
            algo_config=gptq,
        )
        quantizer.process()
    except Exception as exc:
        raise step_failed(
            "ONNX Runtime INT4 quantization (MatMulNBitsQuantizer"
            + (", GPTQ)" if samples else ")"),
            exc,
            "The fp32 candidate of onnxruntime-genai is unaffected",
        ) from exc
    quantized = quantizer.model.model
    n = sum(node.op_type == "MatMulNBits" for node in quantized.graph.node)
    if n == 0:
        raise StepFailed("MatMulNBitsQuantizer found no constant MatMul weight to make INT4")
    quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    method = {"method": "gptq", "calibration_samples": len(samples)} if samples else {}
    return {
        "tool": "onnxruntime.quantization.MatMulNBitsQuantizer",
        "bits": 4,
        "block_size": INT4_BLOCK,
        "symmetric": True,
        "accuracy_level": 4,
        "int4_matmuls": n,
        **method,
    }


def prefill_inputs(ids: Sequence[int], facts: DecoderFacts) -> dict[str, np.ndarray]:
    """The exported decoder's inputs for one text read from the start: an empty cache."""
    n = len(ids)
    inputs: dict[str, np.ndarray] = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None, :],
    }
    empty = np.zeros((1, facts.kv_heads, 0, facts.head_size), dtype=np.float32)
    for name in input_names(facts.layers)[3:]:
        inputs[name] = empty
    return inputs
