"""Rebuild a workload's PyTorch model inside a worker process.

Only worker and build processes build models: that imports torch (and
transformers for Hugging Face folders), which the orchestrator never needs.
The one exception is `check_weights_file`, which the orchestrator calls on a
kind = "torch" weights file so an unsafe file is refused before any build.

A weights file is a plain state_dict, or (with `weights_key`) a checkpoint dict
that holds one: the file is read with torch.load(weights_only=True) all the same,
then the key path is followed and what it reaches must be a plain state_dict.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from bakeoff.errors import UserError, did_you_mean
from bakeoff.source import PICKLE_SUFFIXES, ModelSource, import_factory

# The seed of every weight a Hugging Face folder lacks (an untrained head): each
# worker process rebuilds the model, and all of them must build the same one.
MISSING_WEIGHTS_SEED = 0


def build_torch_model(source: ModelSource) -> Any:
    """The FP32 torch.nn.Module in eval mode, for kinds torch and hf."""
    import torch

    if source.kind == "torch":
        assert source.factory is not None
        make = import_factory(source.factory, source.base_dir, source.factory, "model.factory")
        model = make()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"model.factory {source.factory!r} returned {type(model).__name__}, "
                "expected a torch.nn.Module"
            )
        if source.weights is not None:
            load_weights(model, source.weights, source.weights_key)
    elif source.kind == "hf":
        assert source.path is not None
        if source.task == "sequence-classification":
            model = hf_sequence_classifier(source.path, source.num_labels)
        elif source.task in (None, "feature-extraction"):
            model = hf_sentence_embedder(source.path)
        else:
            raise ValueError(f"unknown Hugging Face task {source.task!r}")
    else:
        raise ValueError(f"model kind {source.kind!r} has no PyTorch form")
    return model.float().eval()


# ------------------------------------------------------------- weight files


# What torch's weights-only unpickler says when a file needs more than tensors and
# plain containers: a global (function or class) to import and call, i.e. code.
_NEEDS_CODE = re.compile(
    r"GLOBAL \S+ was not an allowed global|whose module \S+ is blocked|"
    r"Trying to call reduce|Can only (?:create new object|build)|add_safe_globals"
)


def _unpickler_reason(text: str) -> str | None:
    """The weights-only unpickler's own complaint, without torch's surrounding advice."""
    if "WeightsUnpickler error:" not in text:
        return None
    reason = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0]
    reason = " ".join(reason.split(" Please use")[0].split())
    return reason or None


def _refusal(path: str, where: str, exc: Exception) -> UserError:
    """Why torch.load(weights_only=True) stopped, in one line, without torch's
    advice to retry with weights_only=False."""
    text = str(exc)
    reason = _unpickler_reason(text)
    if "Weights only load failed" in text and _NEEDS_CODE.search(text):
        detail = f" (torch's weights-only loader: {reason})" if reason else ""
        return UserError(
            f"{where}: refused: {path} would run code when unpickled{detail}. bakeoff only "
            "loads plain tensors and will not unpickle it. Save the weights alone instead: "
            "safetensors.torch.save_file(model.state_dict(), 'model.safetensors') (preferred), "
            "or torch.save(model.state_dict(), 'model.pt') with plain tensors in it."
        )
    why = reason or f"{type(exc).__name__}: {' '.join(text.split())[:300]}"
    return UserError(
        f"{where}: cannot read {path} as a PyTorch state_dict (is it a file written by "
        f"torch.save?): {why}"
    )


def torch_load_weights_only(path: str, where: str, mmap: bool) -> Any:
    """The object a torch file holds, read by the weights-only unpickler and nothing else
    (a file that would run code is refused, unread); `mmap` leaves tensor data on disk."""
    import torch

    try:
        # weights_only=True is the whole point: the restricted unpickler refuses any
        # global outside tensors and plain containers, before calling it.
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # UnpicklingError, RuntimeError, KeyError on junk
        raise _refusal(path, where, exc) from None


def _check_state_dict(obj: Any, location: str, where: str, weights_key: str | None) -> None:
    import torch

    if not isinstance(obj, dict):
        raise UserError(
            f"{where}: {location} holds a {type(obj).__name__}, not a state_dict "
            "(a dict of parameter name -> tensor); save model.state_dict()"
        )
    odd = [k for k, v in obj.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))]
    if odd:
        shown = ", ".join(repr(k) for k in odd[:5]) + (" ..." if len(odd) > 5 else "")
        # A training checkpoint usually holds the state_dict under a key of its own:
        # name that key, so the fix is one line of the workload, not a re-save.
        inside = [f"{weights_key}.{name}" if weights_key else name for name in _inner(obj)]
        if inside:
            keys = " or ".join(f'"{name}"' for name in inside[:3])
            fix = f"set weights_key = {keys} to read the state_dict inside it"
        else:
            fix = "save model.state_dict() alone"
        raise UserError(
            f"{where}: {location} is not a plain state_dict: entries {shown} are not tensors "
            f"(a training checkpoint? {fix})"
        )


def _inner(obj: dict[Any, Any], depth: int = 2) -> list[str]:
    """Dotted key paths, `depth` levels deep at most, of the non-empty dicts of
    tensors by name in `obj`: the state_dicts a training checkpoint holds."""
    import torch

    found: list[str] = []
    for key, value in obj.items():
        if not (isinstance(key, str) and isinstance(value, dict) and value):
            continue
        if all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()):
            found.append(key)
        elif depth > 1:
            found += [f"{key}.{name}" for name in _inner(value, depth - 1)]
    return found


def _follow_key(obj: Any, weights_key: str, path: str, where: str) -> tuple[Any, str]:
    """What `weights_key` reaches in a checkpoint, and where that is (for messages).

    Each dot-separated part is a dict key; at each level the longest run of parts
    that is a key wins, so a key with dots of its own ("encoder.v2") is found whole.
    """
    location, rest = path, weights_key
    while rest:
        first = rest.split(".")[0]
        if not isinstance(obj, dict):
            kind = type(obj).__name__
            article = "an" if kind[:1].lower() in "aeiou" else "a"
            raise UserError(
                f"{where}: {location} is not a dict ({article} {kind}): it has no key {first!r}"
            )
        key = _longest_key(obj, rest)
        if key is None:
            names = [k for k in obj if isinstance(k, str)]
            raise UserError(
                f"{where}: {location} has no key {first!r}{did_you_mean(first, names)}; "
                f"its keys: {_shown_keys(list(obj))}"
            )
        obj, location, rest = obj[key], f"{location}[{key!r}]", rest[len(key) + 1 :]
    return obj, location


def _longest_key(obj: dict[Any, Any], dotted: str) -> str | None:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if (candidate := ".".join(parts[:n])) in obj:
            return candidate
    return None


def _shown_keys(keys: list[Any], limit: int = 8) -> str:
    if not keys:
        return "none (an empty dict)"
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(repr(k) for k in keys[:limit]) + more


def state_dict_in(obj: Any, path: str, where: str, weights_key: str | None) -> dict[str, Any]:
    """The plain state_dict the file's object is, or holds at `weights_key`."""
    location = path
    if weights_key is not None:
        obj, location = _follow_key(obj, weights_key, path, where)
    _check_state_dict(obj, location, where, weights_key)
    return dict(obj)


def _no_key_in_safetensors(path: str, where: str, weights_key: str | None) -> None:
    if weights_key is not None:
        raise UserError(
            f"{where}: weights_key is for a checkpoint dict (.pt, .pth, .bin); {path} is a "
            "safetensors file, a flat state_dict already: leave weights_key out"
        )


def check_weights_file(path: str, where: str, weights_key: str | None = None) -> None:
    """Refuse an unreadable or unsafe weights file without reading every tensor."""
    if path.endswith(PICKLE_SUFFIXES):
        # mmap leaves tensor data on disk; only the zip format (torch >= 1.6) has it.
        obj = torch_load_weights_only(path, where, mmap=zipfile.is_zipfile(path))
        state_dict_in(obj, path, where, weights_key)
        return
    _no_key_in_safetensors(path, where, weights_key)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="np") as f:  # reads the header only
            if not list(f.keys()):
                raise UserError(f"{where}: {path} holds no tensors")
    except SafetensorError as exc:
        raise UserError(f"{where}: {path} is not a valid safetensors file: {exc}") from None


def read_state_dict(
    path: str, where: str = "model.weights", weights_key: str | None = None
) -> dict[str, Any]:
    """Tensors only: safetensors, or torch.load(weights_only=True), never more."""
    if path.endswith(PICKLE_SUFFIXES):
        obj = torch_load_weights_only(path, where, mmap=False)
        return state_dict_in(obj, path, where, weights_key)
    _no_key_in_safetensors(path, where, weights_key)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except SafetensorError as exc:
        raise UserError(f"{where}: {path} is not a valid safetensors file: {exc}") from None


def weights_where(prefix: str, weights: str, weights_key: str | None) -> str:
    """How messages name the weights a spec gives: `prefix` then the keys' values."""
    key = f", weights_key = {weights_key!r}" if weights_key is not None else ""
    return f"{prefix}model.weights = {weights!r}{key}"


def load_weights(model: Any, path: str, weights_key: str | None = None) -> None:
    """Strict: every parameter and buffer comes from the file (at `weights_key` in it,
    if given), and nothing else is in it."""
    where = weights_where("", Path(path).name, weights_key)
    state = read_state_dict(path, where, weights_key)
    expected = set(model.state_dict())
    missing = sorted(expected - set(state))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        raise UserError(
            f"{where} does not fit the model that model.factory builds: "
            f"missing keys {_some(missing)}; unexpected keys {_some(unexpected)}"
        )
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # shapes that differ
        raise UserError(f"{where} does not fit the model: {' '.join(str(exc).split())}") from None


def _some(keys: list[str], limit: int = 10) -> str:
    if not keys:
        return "none"
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def hf_sentence_embedder(folder: str) -> Any:
    """A local Hugging Face encoder with mean pooling and L2 normalisation.

    Pooling lives inside the module so every runtime exports and runs the same
    computation, and quality compares the sentence embeddings users consume.
    """
    import torch
    from transformers import AutoModel

    # trust_remote_code stays off: a model folder must not run code of its own.
    encoder = AutoModel.from_pretrained(folder, local_files_only=True, trust_remote_code=False)

    class SentenceEmbedder(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceEmbedder(encoder)


def hf_sequence_classifier(folder: str, num_labels: int | None) -> Any:
    """A local Hugging Face model with a sequence-classification head; returns logits.

    A folder without a trained head (a bare encoder) gets a new one. transformers
    would draw it from the global RNG, so every worker process would build a
    different model; the missing weights are drawn here instead, from a fixed seed
    in a fixed order, and the workload warns the user that the head is untrained.
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    extra = {} if num_labels is None else {"num_labels": num_labels}
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG as it was
        torch.manual_seed(MISSING_WEIGHTS_SEED)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            folder,
            local_files_only=True,
            trust_remote_code=False,  # a model folder must not run code of its own
            output_loading_info=True,
            **extra,
        )
    _initialise_missing(model, sorted(info.get("missing_keys", ())))

    class SequenceClassifier(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    return SequenceClassifier(model)


def _initialise_missing(model: Any, names: list[str]) -> None:
    """Weights the folder lacks, drawn from one seeded generator in name order:
    normal(0, initializer_range) for matrices, ones for norm scales, zeros for biases."""
    import torch

    if not names:
        return
    std = float(getattr(model.config, "initializer_range", 0.02))
    generator = torch.Generator().manual_seed(MISSING_WEIGHTS_SEED)
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    with torch.no_grad():
        for name in names:
            t = tensors.get(name)
            if t is None or not t.is_floating_point():
                continue
            if name.endswith("bias"):
                t.zero_()
            elif t.ndim == 1:
                t.fill_(1.0)
            else:
                torch.nn.init.normal_(t, mean=0.0, std=std, generator=generator)


def first_output(out: Any) -> Any:
    """Models may return a tensor, a tuple or a dict; quality compares the first output."""
    if isinstance(out, (tuple, list)):
        return out[0]
    if isinstance(out, dict):
        return next(iter(out.values()))
    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        return out.to_tuple()[0]
    return out
