"""The facts advice is based on, read cheaply: the model's kind, family and parameter
count from its files (config.json, safetensors headers, state_dict tensors, ONNX
initializers, OpenVINO IR constants, SavedModel variables, TFLite tensors, Keras
weights: parameters.py), never by building or running it; this machine's CPU
instruction sets and vendor, NVIDIA GPUs (through the one probe in backends/gpu.py),
Apple Silicon and memory. `facts_for_ref` reads them for a workload reference
without loading its data or importing its factory.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff import hardware
from bakeoff.advise.parameters import (
    onnx_parameter_count,
    path_parameter_count,
    safetensors_params,
    state_dict_parameter_count,
    weights_parameter_count,
)
from bakeoff.backends import gpu
from bakeoff.errors import UserError
from bakeoff.model_file import is_model_path, spec_for_model, spec_toml
from bakeoff.workload import check_model_files, parse_spec, parse_spec_file
from bakeoff.workload.generated import signature_of

# Hugging Face config.json names that mark a generative (token-producing) model.
_GENERATIVE_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_DECODER_TYPES = frozenset(
    {
        "gpt2", "gptj", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen3",
        "phi", "phi3", "gemma", "gemma2", "gemma3", "falcon", "opt", "bloom", "mpt",
    }
)  # fmt: skip
_CNN_TYPES = frozenset(
    {
        "resnet", "convnext", "convnextv2", "efficientnet", "mobilenet_v1", "mobilenet_v2",
        "regnet", "bit", "mobilevit",
    }
)  # fmt: skip
# The built-in workloads' models, known without loading (minilm would tokenize,
# digits would train). digits: conv 1->16 and 16->32 (3x3), linear 512->64->10.
_DIGITS_FACTORY = "bakeoff.builtins.digits:build_model"
_DIGITS_PARAMS = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (512 * 64 + 64) + (64 * 10 + 10)


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None


@dataclass(frozen=True)
class Facts:
    """What advice is based on: detected here, or stated by the user."""

    workload: str
    model_kind: str  # the workload's model.kind (builtins resolved to theirs)
    family: str  # transformer | llm | cnn | other | unknown
    architecture: str | None  # e.g. BertModel, or what the family was read from
    pretrained: bool  # a Hugging Face folder: weights trained by someone else
    custom: bool  # the user's own PyTorch code (model.factory)
    params: int | None
    params_source: str  # where the count comes from, or why it is unknown
    machine: str
    cpu_flags: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    gpu_source: str
    apple_silicon: bool
    memory_gib: float | None
    # Where cpu_flags come from: "/proc/cpuinfo", or BAKEOFF_CPU_FLAGS when simulated.
    cpu_flags_source: str = "/proc/cpuinfo"
    # Intel, AMD, Hygon, ... or "unknown"; BAKEOFF_CPU_VENDOR may simulate it.
    cpu_vendor: str = "unknown"
    # A model file quantized already (a .tflite with int8 weights): its weights' type.
    quantized: str | None = None

    def describe(self) -> str:
        params = "unknown" if self.params is None else _count(self.params)
        gpu = (
            ", ".join(f"{g.name} ({_mib(g.memory_mib)})" for g in self.gpus)
            if self.gpus
            else "no NVIDIA GPU"
        )
        arch = f" ({self.architecture})" if self.architecture else ""
        origin = "pretrained " if self.pretrained else "custom " if self.custom else ""
        return (
            f"model: {origin}{self.family}{arch}, kind {self.model_kind}, {params} parameters; "
            f"machine: {self.machine}"
            + (" (Apple Silicon)" if self.apple_silicon else "")
            + (f", {self.cpu_vendor} CPU" if self.cpu_vendor != "unknown" else "")
            + f", CPU flags {', '.join(self.cpu_flags) or 'none notable'}"
            + (
                f" (simulated by {hardware.FLAGS_VARIABLE})"
                if self.cpu_flags_source != "/proc/cpuinfo"
                else ""
            )
            + f"; {gpu}"
        )


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _mib(m: int | None) -> str:
    return "memory unknown" if m is None else f"{m / 1024:.0f} GiB"


def detect_gpus() -> tuple[tuple[Gpu, ...], str]:
    """NVIDIA GPUs (with memory where nvidia-smi says it) and where they were read: the
    one probe that the fingerprint and the CUDA runtimes read too."""
    found = gpu.probe()  # no framework: nvidia-smi or /proc only
    gpus = tuple(
        Gpu(g["name"], g["memory_mb"] if isinstance(g.get("memory_mb"), int) else None)
        for g in found.gpus
    )
    return gpus, found.source


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def _memory_gib() -> float | None:
    import psutil  # light; already a dependency of the fingerprint

    return round(psutil.virtual_memory().total / 2**30, 1)


def _hf_shards(folder: Path, name: str) -> list[Path]:
    """A Hugging Face folder's weight files saved as `name` (model.safetensors,
    pytorch_model.bin): the one file, or the shards its `name`.index.json lists."""
    index = folder / f"{name}.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            return []
        return [folder / s for s in sorted(shards)]
    return [folder / name] if (folder / name).is_file() else []


def _hf_params(folder: Path, config: dict[str, Any]) -> tuple[int | None, str]:
    files = _hf_shards(folder, "model.safetensors")
    if files:
        n = safetensors_params(files)
        if n is not None:
            return n, "safetensors header"
    pickled = _hf_shards(folder, "pytorch_model.bin")
    if pickled:
        try:
            count = sum(state_dict_parameter_count(str(f)) for f in pickled)
            return count, "state_dict tensors"
        except Exception:  # refused or broken: the run says so; advice estimates
            pass
    # A transformer's size from its config: 12 h^2 per layer plus the embeddings.
    h, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    vocab = config.get("vocab_size")
    if isinstance(h, int) and isinstance(layers, int) and isinstance(vocab, int):
        return 12 * layers * h * h + vocab * h, "estimate from config.json"
    return None, "unknown (no safetensors weights, config.json without sizes)"


def _hf_family(config: dict[str, Any]) -> tuple[str, str | None]:
    archs = [str(a) for a in config.get("architectures") or []]
    model_type = str(config.get("model_type", ""))
    arch = archs[0] if archs else model_type or None
    if (
        any(a.endswith(_GENERATIVE_SUFFIXES) for a in archs)
        or config.get("is_decoder") is True
        or model_type in _DECODER_TYPES
    ):
        return "llm", arch
    if model_type in _CNN_TYPES:
        return "cnn", arch
    if "num_attention_heads" in config or "n_head" in config:
        return "transformer", arch
    return "unknown", arch


def _onnx_facts(path: Path) -> tuple[str, str | None, int | None, str]:
    import onnx  # not a runtime: reads the protobuf; external data stays on disk

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a broken file: the run will say so; advice goes on
        return "unknown", None, None, f"unknown (cannot read {path.name}: {exc})"
    n = onnx_parameter_count(model)
    ops = {node.op_type for node in model.graph.node}
    if ops & {"Attention", "MultiHeadAttention"} or {"MatMul", "Softmax"} <= ops:
        family = "transformer"
    elif "Conv" in ops:
        family = "cnn"
    else:
        family = "other"
    return family, "ONNX graph", n, "ONNX initializers"


def model_facts(
    kind: str,
    path: str | None,
    weights: str | None,
    factory: str | None,
    weights_key: str | None = None,
) -> dict[str, Any]:
    """family, architecture, pretrained, custom, params, params_source: from files only."""
    out: dict[str, Any] = {
        "family": "unknown",
        "architecture": None,
        "pretrained": False,
        "custom": False,
        "params": None,
        "params_source": "unknown (not read for this model kind)",
    }
    if kind == "hf" and path:
        folder = Path(path)
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        out["family"], out["architecture"] = _hf_family(config)
        out["params"], out["params_source"] = _hf_params(folder, config)
        out["pretrained"] = True
    elif kind == "onnx" and path:
        fam, arch, n, src = _onnx_facts(Path(path))
        out.update(family=fam, architecture=arch, params=n, params_source=src)
    elif kind == "torch" and factory == _DIGITS_FACTORY:
        out.update(
            family="cnn",
            architecture="builtin:digits CNN",
            params=_DIGITS_PARAMS,
            params_source="builtin",
        )
    elif kind == "torch":
        out["custom"] = True
        out["params"], out["params_source"] = _weights_params(weights, weights_key)
    elif path and (counted := path_parameter_count(kind, path)) is not None:
        out["params"], out["params_source"] = counted  # openvino, savedmodel, keras, tflite
    if kind == "tflite" and path:
        from bakeoff.backends.tflite_file import quantized_weights

        out["quantized"] = quantized_weights(path)  # then the file is its own reference
    return out


def _weights_params(weights: str | None, weights_key: str | None) -> tuple[int | None, str]:
    """A custom torch model's count, from its weights file; without one, only building
    the model (importing the user's code) would tell, and advice builds nothing."""
    if not weights:
        return None, "unknown (no weights file; counting would build the model)"
    try:
        return weights_parameter_count(weights, weights_key)
    except Exception as exc:  # refused or broken: the run says so; advice goes on
        return None, f"unknown (cannot read {Path(weights).name}: {' '.join(str(exc).split())})"


def detect_facts(
    origin: str,
    kind: str,
    path: str | None,
    weights: str | None,
    factory: str | None,
    weights_key: str | None = None,
) -> Facts:
    gpus, gpu_source = detect_gpus()
    flags = hardware.cpu_flags()
    simulated = hardware.simulated_cpu_flags() is not None
    return Facts(
        workload=origin,
        model_kind=kind,
        machine=platform.machine(),
        cpu_flags=tuple(f for f in hardware.NOTABLE_FLAGS if f in flags),
        cpu_flags_source=hardware.FLAGS_VARIABLE if simulated else "/proc/cpuinfo",
        cpu_vendor=hardware.cpu_vendor() if hardware.is_x86() else "unknown",
        gpus=gpus,
        gpu_source=gpu_source,
        apple_silicon=is_apple_silicon(),
        memory_gib=_memory_gib(),
        **model_facts(kind, path, weights, factory, weights_key),
    )


def _builtin_model(name: str) -> tuple[str, str | None, str | None]:
    """(kind, path, factory) of a built-in workload's model, without loading it."""
    from bakeoff.builtins import BUILTINS

    if name == "minilm":
        from bakeoff.builtins.minilm import model_folder

        return "hf", model_folder(), None
    if name == "digits":
        return "torch", None, _DIGITS_FACTORY
    if name == "digits-keras":
        from bakeoff.builtins.digits_keras import model_path

        return "keras", str(model_path()), None  # counted once its first run trains it
    raise UserError(f"builtin:{name}: no such built-in workload (have: {', '.join(BUILTINS)})")


def facts_for_ref(ref: str | None) -> Facts:
    """Facts for `builtin:NAME` or a workload TOML, from the spec and model files only:
    no data is loaded, no factory imported (an MXNet workload is refused by the spec)."""
    ref = ref or "builtin:minilm"
    if ref.startswith("builtin:"):
        kind, path, factory = _builtin_model(ref.removeprefix("builtin:"))
        return detect_facts(ref, kind, path, None, factory)
    file = Path(ref)
    if is_model_path(ref):  # a model given alone: the spec `bakeoff run` would use
        spec = parse_spec(spec_toml(spec_for_model(ref), ref), ref)
        file = Path(ref).resolve()
        if spec.model.path and spec.data and spec.data.generate is not None:
            signature_of(spec.model.path, ref)  # a file that is no model is said now
    elif not file.is_file():
        raise UserError(
            f"{ref}: no such workload file (give a .toml path or builtin:minilm / builtin:digits)"
        )
    else:
        spec = parse_spec_file(file, ref)
    model = spec.model
    if model.kind == "builtin":
        assert model.name is not None
        kind, path, factory = _builtin_model(model.name)
        return detect_facts(ref, kind, path, None, factory)
    base = file.resolve().parent
    check_model_files(model, str(base), ref)  # advice on a model that is not there is none
    path = str((base / model.path).absolute()) if model.path else None
    weights = str((base / model.weights).absolute()) if model.weights else None
    return detect_facts(ref, model.kind, path, weights, model.factory, model.weights_key)
