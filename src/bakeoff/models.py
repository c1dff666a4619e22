"""Rebuild a workload's PyTorch model inside a worker process.

Only worker and build processes call this: it imports torch (and transformers
for Hugging Face folders), which the orchestrator never needs.
"""

from __future__ import annotations

from typing import Any

from bakeoff.workload import ModelSource, import_factory


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
    elif source.kind == "hf":
        assert source.path is not None
        model = hf_sentence_embedder(source.path)
    else:
        raise ValueError(f"model kind {source.kind!r} has no PyTorch form")
    return model.float().eval()


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


def first_output(out: Any) -> Any:
    """Models may return a tensor, a tuple or a dict; quality compares the first output."""
    if isinstance(out, (tuple, list)):
        return out[0]
    if isinstance(out, dict):
        return next(iter(out.values()))
    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        return out.to_tuple()[0]
    return out
