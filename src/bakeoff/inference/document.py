"""The result document of a finished run: what the store keeps, `--json` writes and
every report reads. Its keys only grow (SCHEMA_VERSION says when they change)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import bakeoff
from bakeoff.candidates import candidate_document
from bakeoff.inference.context import RunContext
from bakeoff.inference.groups import Measuring
from bakeoff.inference.reference import Reference
from bakeoff.inference.variants import Builds
from bakeoff.workload import DEFAULT_MAX_LENGTH, Workload

SCHEMA_VERSION = 1
# History of the result document:
#   1 (0.1.0): first version: workload, environment, candidates, verdicts, timing.


def _workload_section(ctx: RunContext, reference: Reference) -> dict[str, Any]:
    workload = ctx.workload
    return {
        "name": workload.name,
        "origin": workload.origin,
        "model_kind": workload.source.kind,
        "metric": workload.spec.quality.metric,
        "max_drop": workload.spec.quality.max_drop,
        "samples": workload.n_samples,
        "quality_samples": len(reference.outputs[0][1]),
        "reference": reference.variant.id,
        # The worker and chunk size the reference's outputs came from, and the chunk
        # sizes that failed before it (a model that crashes at one batch size).
        "reference_outputs": reference.record(),
        "variable_axes": workload.source.variable_axes,
        "batch_axes": workload.source.batch_axes,
        "constants": workload.source.constants,
        "constraints": workload.limits,
        "notes": list(workload.notes)
        + (
            [f"the reference is {reference.variant.id}, standing in: {reference.stands_in_for}"]
            if reference.stands_in_for
            else []
        ),
        # "generated": made from the model's signature (no data given), so the quality
        # gate ran on them and not on the user's data
        "inputs": "generated" if workload.spec.data and workload.spec.data.generate else "given",
        # where text was tokenized, so an export can take text again (`bakeoff serve`)
        "text": _text_section(workload),
    }


def _text_section(workload: Workload) -> dict[str, Any] | None:
    data = workload.spec.data
    if workload.source.kind != "hf" or data is None or not data.tokenizes_text:
        return None
    if len(data.columns) > 1:  # a dataset's other columns: inputs no text can give
        return None
    return {
        "tokenizer": workload.source.path,
        "max_length": data.max_length or DEFAULT_MAX_LENGTH,
        "inputs": sorted(workload.inputs),
    }


def document(
    ctx: RunContext,
    builds: Builds,
    build_s: float,
    reference: Reference,
    found: Measuring,
    noise: dict[str, Any],
    t_start: float,
    efficiency_s: float,
) -> dict[str, Any]:
    """`noise`: the machine's noise snapshots before and after measuring;
    `efficiency_s`: counting the FLOPs and measuring the GEMM peak."""
    return {
        "schema_version": SCHEMA_VERSION,
        "bakeoff_version": bakeoff.__version__,
        "run_id": ctx.run_id,
        "workload": _workload_section(ctx, reference),
        "environment": ctx.env,
        "settings": ctx.settings,
        "candidates": [candidate_document(c) for c in ctx.candidates],
        "verdicts": [v.to_dict() for v in found.verdicts],
        "noise": {"before": noise["before"], "during": found.during, "after": noise["after"]},
        "variant_cache": builds.summary(ctx.folder.artifacts),
        "timing_s": {
            # The build phase's wall time: the reference's outputs ran beside the
            # builds, so `reference` is a part of `build`, not added to it.
            "build": round(build_s, 3),
            "build_saved_by_cache": round(builds.saved_s, 3),
            "reference": round(reference.seconds, 3),
            "reference_beside_builds": True,
            "efficiency": round(efficiency_s, 3),
            "measure": round(found.seconds, 3),
            **{f"measure_{k}": round(v, 3) for k, v in found.phases.items()},
            "total": round(time.perf_counter() - t_start, 3),
        },
    }


def write_json(document: dict[str, Any], path: Path) -> None:
    """Write atomically: a reader never sees half a document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, default=_json_default))
    os.replace(tmp, path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
