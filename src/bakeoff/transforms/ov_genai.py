"""The OpenVINO GenAI model folder, from bakeoff's export of a causal LM
(`genai_export.decoder_onnx`): the export converted by OpenVINO, made stateful as
OpenVINO GenAI expects (a `beam_idx` input that reorders the cache, the cache in
the model's state), FP32 or with NNCF's INT8 / INT4 weight compression (INT4 plain,
or tuned by AWQ or GPTQ to calibration text), saved as `openvino_model.xml` beside
the folder's `config.json` and `generation_config.json`.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.transforms import StepFailed, step_failed
from bakeoff.transforms.genai_export import DecoderFacts, prefill_inputs

OPENVINO_FILE = "openvino_model.xml"
_HF_FILES = ("config.json", "generation_config.json")


def openvino_genai_folder(
    export: dict[str, Any],
    folder: Path,
    precision: str,
    out_dir: Path,
    method: str = "",
    calibration: Sequence[Sequence[int]] = (),
) -> dict[str, Any]:
    """`out_dir` as an OpenVINO GenAI model folder at `precision` (fp32 | int8 | int4);
    INT4 by `method` ("awq", "gptq": NNCF's data-aware compression, run on the
    `calibration` token ids) or plain round-to-nearest ("")."""
    import openvino as ov

    facts = DecoderFacts(**export["facts"])
    try:
        model = ov.convert_model(export["path"])
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the exported decoder (openvino.convert_model)",
            exc,
            "The other runtimes are unaffected",
        ) from exc
    settings: dict[str, Any] = {"stateful": True, "exported_by": "bakeoff"}
    if method and precision != "int4":
        raise StepFailed(f"openvino-genai runs {method.upper()} at int4 only, not {precision}")
    # Compressed before the cache becomes state: NNCF's data-aware methods run
    # parts of the model on their own, which a stateful model's state prevents.
    if precision == "int4":
        from bakeoff.transforms.nncf_quantize import compress_int4

        samples = [prefill_inputs(ids, facts) for ids in calibration] if method else None
        model, settings["quantization"] = compress_int4(model, method, samples)
    elif precision == "int8":
        model, settings["quantization"] = _compress_int8(model)
    elif precision != "fp32":
        raise StepFailed(f"openvino-genai runs fp32, int8 or int4 here, not {precision}")
    try:
        _make_stateful(model, facts.layers)
    except StepFailed:
        raise
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the exported decoder (the cache made state)",
            exc,
            "The other runtimes are unaffected",
        ) from exc
    ov.save_model(model, str(out_dir / OPENVINO_FILE), compress_to_fp16=False)
    for name in _HF_FILES:
        if (folder / name).exists():
            shutil.copy2(folder / name, out_dir / name)
    return {"path": str(out_dir), "settings": settings}


def _make_stateful(model: Any, layers: int) -> None:
    """The cache into the model's state, as OpenVINO GenAI's LLMPipeline expects: a
    `beam_idx` input gathers each past tensor's rows (which sequence continues
    which), then every past input and its present output become one state."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    beam = ops.parameter(ov.PartialShape([-1]), ov.Type.i32, name="beam_idx")
    beam.output(0).get_tensor().set_names({"beam_idx"})
    pairs: dict[str, str] = {}
    for param in model.get_parameters():
        name = param.get_output_tensor(0).get_any_name()
        if not name.startswith("past_key_values."):
            continue
        users = list(param.output(0).get_target_inputs())
        reordered = ops.gather(param, beam, ops.constant(np.int64(0)))
        for user in users:
            user.replace_source_output(reordered.output(0))
        pairs[name] = name.replace("past_key_values.", "present.", 1)
    if len(pairs) != 2 * layers:
        raise StepFailed(f"the export has {len(pairs)} cache inputs, not {2 * layers}")
    model.add_parameters([beam])
    apply_make_stateful_transformation(model, pairs)
    model.validate_nodes_and_infer_types()


def _compress_int8(model: Any) -> tuple[Any, dict[str, Any]]:
    import nncf

    from bakeoff.transforms.nncf_quantize import compressed_weights

    try:
        compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    except Exception as exc:
        raise step_failed(
            "NNCF INT8 weight compression (nncf.compress_weights)",
            exc,
            "The fp32 candidate of openvino-genai is unaffected",
        ) from exc
    weights = compressed_weights(compressed)
    return compressed, {
        "tool": "nncf.compress_weights",
        "mode": "int8_asym",
        "int8_weights": len(weights),
    }
