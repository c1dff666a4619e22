"""Content hashes: what a build step's output can depend on, and the keys made of them.

A step's key hashes everything its output can depend on: the model's files,
the calibration data, the step's name (which encodes its settings), the
versions of the libraries that build variants, Python and the machine type,
and bakeoff itself (its version and the source of the code that builds
artifacts, so an edited quantizer in a development install is not served
stale files). Earlier steps need no key of their own in a later step's key:
they are functions of the same inputs, named uniquely.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.cache.layout import (
    DISABLE_ENV,
    ENTRY_FILE,
    FORMAT,
    KEY_FILE,
    _write_atomic,
    enabled,
    variants_dir,
)

if TYPE_CHECKING:
    from bakeoff.source import ModelSource

# Folders of bakeoff whose code makes artifacts; their source is part of the key.
# Paths are relative to the bakeoff package folder, the parent of this package.
_BUILD_CODE = ("transforms", "backends", "models.py")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _hash_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _folder_files(folder: Path) -> list[tuple[str, Path]]:
    """Every file under `folder` by relative path; hidden ones (.git, locks) left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                path = Path(dirpath) / name
                out.append((path.relative_to(folder).as_posix(), path))
    return out


def folder_hash(folder: Path) -> str:
    """A folder's identity by content: every file's relative path and sha256 (hidden
    ones left out, as `_folder_files` does)."""
    return _hash_json({rel: sha256_file(p) for rel, p in _folder_files(folder)})


def _onnx_files(path: Path) -> list[tuple[str, Path]]:
    """The .onnx file and the external-data files beside it that it names.

    External data is referenced by relative file name inside the protobuf, so
    a sibling whose name occurs in the file's bytes is one (found without
    importing onnx in the orchestrator).
    """
    files = [("model.onnx", path)]
    data = path.read_bytes()
    siblings = [p for p in path.parent.iterdir() if p.is_file() and p != path]
    if len(siblings) <= 500:
        files += [(p.name, p) for p in sorted(siblings) if p.name.encode() in data]
    return files


def _module_files(source: ModelSource) -> list[tuple[str, Path]]:
    """The factory's module, the callable's own module, and every module loaded from
    the workload's folder (local helpers the factory imports)."""
    import inspect

    from bakeoff.source import import_factory

    assert source.factory is not None
    module_name = source.factory.partition(":")[0]
    make = import_factory(source.factory, source.base_dir, source.factory, "model.factory")
    found = [sys.modules.get(module_name), inspect.getmodule(make)]
    modules = [m for m in found if m is not None]
    base = Path(source.base_dir).resolve() if source.base_dir else None
    if base is not None:
        # Installed packages are covered by their versions, not by their files
        # (a workload kept in a folder that also holds a virtual environment).
        installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        for module in list(sys.modules.values()):
            origin = getattr(module, "__file__", None)
            if not origin:
                continue
            path = Path(origin).resolve()
            if (
                path.is_relative_to(base)
                and not any(path.is_relative_to(p) for p in installed)
                and not {"site-packages", "dist-packages"} & set(path.parts)
            ):
                modules.append(module)
    files: dict[str, Path] = {}
    for module in modules:
        origin = getattr(module, "__file__", None)
        if not origin or not Path(origin).is_file():
            continue
        path = Path(origin).resolve()
        # Labels, not absolute paths: the same model in another folder is the same model.
        if base is not None and path.is_relative_to(base):
            label = path.relative_to(base).as_posix()
        else:
            label = f"module:{module.__name__}"
        files[label] = path
    return sorted(files.items())


# Source fields added after runs were first stored, with the value they have when
# unset: a run stored before one was added was hashed without it.
ADDED_LATER: dict[str, Any] = {"weights_key": None}


def model_hash(source: ModelSource) -> dict[str, Any]:
    """{"hash", "files"}: the model's identity by content, for every model kind.

    torch: the factory's module file(s) and the weights file; hf: every file of
    the folder; onnx: the file and its external data; openvino: the .xml and
    .bin. Every other field of the source (kind, factory, task, options...)
    is part of the hash as given, so a field added later counts too; a field added
    later counts where it is set (`ADDED_LATER`), so the runs stored before it keep
    their hash and still resume.
    """
    described = {
        k: v
        for k, v in dataclasses.asdict(source).items()
        if k not in ("path", "base_dir", "weights")
        and not (k in ADDED_LATER and v == ADDED_LATER[k])
    }
    files: list[tuple[str, Path]] = []
    if source.kind == "torch" and source.factory:
        files += _module_files(source)
    if source.weights:
        files.append(("weights", Path(source.weights)))
    if source.path:
        path = Path(source.path)
        if path.is_dir():
            files += [(f"path/{rel}", p) for rel, p in _folder_files(path)]
        elif path.suffix == ".onnx":
            files += [(f"path/{rel}", p) for rel, p in _onnx_files(path)]
        elif path.suffix == ".xml":
            files += [("path/model.xml", path), ("path/model.bin", path.with_suffix(".bin"))]
        else:
            files.append(("path", path))
    digests = {label: sha256_file(p) for label, p in files if p.is_file()}
    missing = sorted(label for label, p in files if not p.is_file())
    return {
        "hash": _hash_json({"source": described, "files": digests, "missing": missing}),
        "files": sorted(digests),
    }


def data_hash(data_path: Path, input_names: list[str]) -> str:
    """The calibration split (calib/<name>) and the constants fed with it (const/<name>):
    dtype, shape and bytes of each input; and each batch axis that is not 0, which
    says where its samples are (see bakeoff.batching)."""
    import numpy as np

    from bakeoff.batching import BATCH_AXIS_PREFIX, CONST_PREFIX

    h = hashlib.sha256()
    with np.load(data_path, allow_pickle=False) as z:
        for name in sorted(input_names):
            # A workload without constants or batch axes hashes as it always did.
            for key, label in (
                (f"calib/{name}", name),
                (CONST_PREFIX + name, CONST_PREFIX + name),
                (BATCH_AXIS_PREFIX + name, BATCH_AXIS_PREFIX + name),
            ):
                if key not in z.files:
                    continue
                arr = np.asarray(z[key], order="C")
                h.update(f"{label}|{arr.dtype.str}|{arr.shape}|".encode())
                h.update(arr.tobytes())
    return h.hexdigest()


_code_hash: str | None = None


def code_hash() -> str:
    """The source of bakeoff's artifact-making code, read once per process."""
    global _code_hash
    if _code_hash is None:
        root = Path(__file__).resolve().parent.parent  # src/bakeoff, not src/bakeoff/cache
        h = hashlib.sha256()
        for part in _BUILD_CODE:
            path = root / part
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for f in files:
                h.update(f.relative_to(root).as_posix().encode() + b"\0")
                h.update(f.read_bytes() + b"\0")
        _code_hash = h.hexdigest()
    return _code_hash


# ---------------------------------------------------------------- per run


def prepare_run(
    artifacts_dir: Path,
    source: ModelSource,
    data_path: Path,
    input_names: list[str],
    packages: dict[str, Any],
) -> str:
    """Write the run's base key for its build steps; return a line for the user.

    Without a key file (cache off, or the model cannot be hashed) steps are
    cached within the run only, as before.
    """
    import bakeoff

    key_file = artifacts_dir / KEY_FILE
    if not enabled():
        key_file.unlink(missing_ok=True)
        return f"variant cache off ({DISABLE_ENV}={os.environ.get(DISABLE_ENV)})"
    try:
        model = model_hash(source)
        root = variants_dir()
        root.mkdir(parents=True, exist_ok=True)
    except Exception as exc:  # a model file that cannot be read: build, don't fail
        key_file.unlink(missing_ok=True)
        return f"variant cache not used: {type(exc).__name__}: {exc}"
    components = {
        "format": FORMAT,
        "model": model["hash"],
        "data": data_hash(data_path, input_names),
        "packages": packages,
        "python": ".".join(map(str, sys.version_info[:2])),
        "machine": platform.machine(),
        "bakeoff": bakeoff.__version__,
        "code": code_hash(),
    }
    info = {
        "base_key": _hash_json(components),
        "components": components,
        "model_files": model["files"],
        "cache_dir": str(root),
    }
    _write_atomic(key_file, json.dumps(info, indent=1))
    return f"variant cache: {root} (model {model['hash'][:12]}){_stale_note(root, components)}"


def run_model_hash(artifacts_dir: Path) -> str | None:
    """The model hash a run's builds were keyed on (see `prepare_run`), or None when
    that run had no key (cache off, or a model that could not be hashed)."""
    try:
        return str(json.loads((artifacts_dir / KEY_FILE).read_text())["components"]["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stale_note(root: Path, components: dict[str, Any]) -> str:
    """Why entries for this model and data will not be used, when no entry can be:
    so "0 reused" after a library upgrade or a code change is explained."""
    differ: set[str] = set()
    n = 0
    for d in root.iterdir():
        try:
            theirs = json.loads((d / ENTRY_FILE).read_text())["components"]
        except (OSError, ValueError, KeyError):
            continue
        if theirs.get("model") != components["model"] or theirs.get("data") != components["data"]:
            continue
        diff = {k for k in components if theirs.get(k) != components[k]}
        if not diff:
            return ""
        differ |= diff
        n += 1
    if not n:
        return ""
    names = {"packages": "library versions", "code": "bakeoff code", "bakeoff": "bakeoff version"}
    return f"; {n} entries for this model and data do not apply (other " + (
        ", ".join(sorted(names.get(k, k) for k in differ)) + ")"
    )


def step_key(base_key: str, step: str) -> str:
    return hashlib.sha256(f"{base_key}\n{step}".encode()).hexdigest()
