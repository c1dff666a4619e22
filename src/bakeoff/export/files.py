"""The run's measured files copied into an export folder: the model file under the
name its runtime loads (each checked against the sha256 the run recorded when it
built it), and the model folder's tokenizer where the run tokenized text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from bakeoff.cache import sha256_file
from bakeoff.errors import UserError
from bakeoff.paths import RunFolder
from bakeoff.workload.data import TOKENIZER_FILES

# The file each runtime's export is loaded from.
MAIN_FILE = {"onnxruntime": "model.onnx", "openvino": "model.xml", "litert": "model.tflite"}


def variant_id(cand: dict[str, Any]) -> str:
    parts = [cand["runtime"], cand["precision"]] + ([cand["method"]] if cand["method"] else [])
    return "-".join(parts)


def artifact_of(cand: dict[str, Any], run: RunFolder) -> dict[str, Any]:
    from bakeoff.cache import VARIANTS_FILE

    path = run.artifacts / VARIANTS_FILE
    try:
        variants = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing: the run was made by a bakeoff without export, or its "
            "folder was removed; run it again to export"
        ) from None
    vid = variant_id(cand)
    if vid not in variants:
        raise UserError(f"{path} has no artifact for {vid}")
    return dict(variants[vid])


def check_measured(src: Path, run: RunFolder) -> bool:
    """The run folder's file must still be the file that was measured; False when
    nothing was recorded to check it against (the user's own ONNX or IR file)."""
    from bakeoff.cache import ORIGIN_FILE

    if not src.is_file():
        raise UserError(f"artifact {src} is missing (was the run folder {run.path} cleaned up?)")
    artifacts = run.artifacts.resolve()
    try:
        rel = src.resolve().relative_to(artifacts)
    except ValueError:
        return False
    origin_path = artifacts / rel.parts[0] / ORIGIN_FILE
    if not origin_path.exists():
        return False
    files = json.loads(origin_path.read_text()).get("files", {})
    recorded = files.get(Path(*rel.parts[1:]).as_posix())
    if recorded is None:
        return False
    if sha256_file(src) != recorded["sha256"]:
        raise UserError(f"{src} changed after it was built and measured (sha256 differs)")
    return True


def copy_artifact(cand: dict[str, Any], run: RunFolder, dest: Path) -> dict[str, Any]:
    """The measured file(s): the model file renamed model.onnx / model.xml, an IR's
    weights as model.bin, ONNX external data under the names the graph gives them."""
    from bakeoff.sizes import artifact_files

    artifact = artifact_of(cand, run)
    src = Path(artifact["path"])
    if not src.is_file():
        raise UserError(f"artifact {src} is missing (was the run folder {run.path} cleaned up?)")
    main = MAIN_FILE[cand["runtime"]]
    verified = True
    for f in artifact_files(src):
        if f == src:
            name = main
        elif f.suffix == ".bin" and main == "model.xml":
            name = "model.bin"
        else:
            name = f.relative_to(src.parent).as_posix()
        verified = check_measured(f, run) and verified
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / name)
    return {
        "file": main,
        "exporter": artifact.get("exporter"),
        "dynamic_batch": True,
        # the files' sha256 match what the run recorded when it built them
        "model_verified_against_run": verified,
    }


# What AutoTokenizer reads from a model folder (the vocabulary files, and its
# settings); the weights stay behind.
TOKENIZER_FILES_COPIED = (
    *TOKENIZER_FILES,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "config.json",
)
TOKENIZER_DIR = "tokenizer"


def tokenized(record: dict[str, Any]) -> bool:
    text = ((record["document"] or {}).get("workload") or {}).get("text")
    return bool(text and text.get("tokenizer"))


def copy_tokenizer(record: dict[str, Any], dest: Path) -> dict[str, Any] | None:
    """The model folder's tokenizer, when the run tokenized text with it, so the export
    takes text again (`bakeoff serve` accepts BYTES inputs); None otherwise, or when
    the folder is gone (the export still takes token ids)."""
    if not tokenized(record):
        return None
    text = record["document"]["workload"]["text"]
    folder = Path(text["tokenizer"])
    found = [folder / n for n in TOKENIZER_FILES_COPIED if (folder / n).is_file()]
    if not any(f.name != "config.json" for f in found):
        return None
    (dest / TOKENIZER_DIR).mkdir()
    for f in found:
        shutil.copy2(f, dest / TOKENIZER_DIR / f.name)
    return {
        "tokenizer": TOKENIZER_DIR,
        "max_length": int(text["max_length"]),
        "inputs": list(text["inputs"]),
    }
