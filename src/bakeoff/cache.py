"""The variant cache: build steps' outputs shared between runs, keyed by content.

A step's key hashes everything its output can depend on: the model's files,
the calibration data, the step's name (which encodes its settings), the
versions of the libraries that build variants, Python and the machine type,
and bakeoff itself (its version and the source of the code that builds
artifacts, so an edited quantizer in a development install is not served
stale files). Earlier steps need no key of their own in a later step's key:
they are functions of the same inputs, named uniquely.

Layout: ``<cache dir>/variants/<key>/entry.json`` plus ``files/`` (the step's
output folder). An entry appears by renaming a finished temporary folder, so a
killed build never leaves a half entry that looks complete, and of two runs
that publish the same key at once the second simply keeps the first's. A hit
hard-links the files into the run's own folder (copies across file systems):
a run folder always holds its artifacts itself, so `bakeoff cache clear`
never breaks `bakeoff export` or `--resume` of an earlier run, and on one file
system no space is used twice. Every file's sha256 is checked before a hit is
used. Failed steps are never cached across runs: a failure may be
environmental (memory, a killed process), so the next run tries again.

The orchestrator writes ``cache_key.json`` into a run's artifacts folder
(`prepare_run`); `bakeoff.transforms.cached_step` reads it in the build
process, so backends name their steps and nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bakeoff.source import ModelSource

FORMAT = 1
KEY_FILE = "cache_key.json"  # in a run's artifacts folder: the run's base key
EVENTS_FILE = "steps.jsonl"  # in a run's artifacts folder: one line per step use
ORIGIN_FILE = "origin.json"  # in a step's run folder: built here or from the cache
VARIANTS_FILE = "variants.json"  # in a run's artifacts folder: artifact per variant
ENTRY_FILE = "entry.json"
DISABLE_ENV = "BAKEOFF_VARIANT_CACHE"  # "off" (or 0/false/no) turns the cache off
# Folders of bakeoff whose code makes artifacts; their source is part of the key.
_BUILD_CODE = ("transforms", "backends", "models.py")
_STEP_REF = "bakeoff-cache://step/"
_RUN_REF = "bakeoff-cache://artifacts/"


class CorruptEntry(Exception):
    """A cache entry whose files are missing or differ from their recorded sha256."""


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "on").strip().lower() not in ("0", "off", "false", "no")


def variants_dir(cache_root: Path | None = None) -> Path:
    if cache_root is None:
        from bakeoff.paths import cache_dir

        cache_root = cache_dir()
    return cache_root / "variants"


# ---------------------------------------------------------------- hashing


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


def model_hash(source: ModelSource) -> dict[str, Any]:
    """{"hash", "files"}: the model's identity by content, for every model kind.

    torch: the factory's module file(s) and the weights file; hf: every file of
    the folder; onnx: the file and its external data; openvino: the .xml and
    .bin. Every other field of the source (kind, factory, task, options...)
    is part of the hash as given, so a field added later counts too.
    """
    described = {
        k: v
        for k, v in dataclasses.asdict(source).items()
        if k not in ("path", "base_dir", "weights")
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
        root = Path(__file__).resolve().parent
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


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def step_key(base_key: str, step: str) -> str:
    return hashlib.sha256(f"{base_key}\n{step}".encode()).hexdigest()


@dataclass(frozen=True)
class StepContext:
    key: str
    step: str
    root: Path  # <cache>/variants
    components: dict[str, Any]

    @property
    def entry_dir(self) -> Path:
        return self.root / self.key


def step_context(artifacts_dir: Path, step: str) -> StepContext | None:
    """The step's cache key in this run, or None when the run has no cache."""
    try:
        info = json.loads((artifacts_dir / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return StepContext(
        step_key(info["base_key"], step), step, Path(info["cache_dir"]), info["components"]
    )


# ---------------------------------------------------------------- files and paths


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        rel: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for rel, p in _folder_files_all(folder)
    }


def _folder_files_all(folder: Path) -> list[tuple[str, Path]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            out.append((path.relative_to(folder).as_posix(), path))
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy
        shutil.copy2(src, dst)


def portable(value: Any, out_dir: Path, artifacts_dir: Path) -> Any:
    """A step result with its paths made relative to the step / run folder."""
    if isinstance(value, dict):
        return {k: portable(v, out_dir, artifacts_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, out_dir, artifacts_dir) for v in value]
    if isinstance(value, str):
        for prefix, ref in ((out_dir, _STEP_REF), (artifacts_dir, _RUN_REF)):
            for form in {str(prefix), os.path.abspath(prefix)}:
                if value == form:
                    return ref
                if value.startswith(form + os.sep):
                    return ref + value[len(form) + 1 :]
    return value


def local(value: Any, out_dir: Path, artifacts_dir: Path, missing: list[str]) -> Any:
    """The inverse of `portable` in another run; run-folder paths that do not exist
    (a dependency this run has not made) are collected in `missing`."""
    if isinstance(value, dict):
        return {k: local(v, out_dir, artifacts_dir, missing) for k, v in value.items()}
    if isinstance(value, list):
        return [local(v, out_dir, artifacts_dir, missing) for v in value]
    if isinstance(value, str):
        if value.startswith(_STEP_REF):
            return str(out_dir / value[len(_STEP_REF) :]) if value != _STEP_REF else str(out_dir)
        if value.startswith(_RUN_REF):
            path = artifacts_dir / value[len(_RUN_REF) :]
            if not path.exists():
                missing.append(str(path))
            return str(path)
    return value


# ---------------------------------------------------------------- entries


def lookup(ctx: StepContext) -> dict[str, Any] | None:
    try:
        meta = json.loads((ctx.entry_dir / ENTRY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT or meta.get("key") != ctx.key:
        return None
    return dict(meta)


def materialize(ctx: StepContext, meta: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Link a hit's files into `out_dir` after checking their sha256; return the result.

    Raises CorruptEntry (the entry is bad: drop it) or OSError (it vanished
    under us, e.g. a concurrent `cache clear`): either way the caller builds.
    """
    files_dir = ctx.entry_dir / "files"
    for rel, info in meta["files"].items():
        src = files_dir / rel
        try:
            digest = sha256_file(src)
        except FileNotFoundError:
            raise CorruptEntry(f"{rel} is missing") from None
        if digest != info["sha256"]:
            raise CorruptEntry(f"{rel} has sha256 {digest[:12]}, recorded {info['sha256'][:12]}")
        _link_or_copy(src, out_dir / rel)
    missing: list[str] = []
    result = local(meta["result"], out_dir, out_dir.parent, missing)
    if missing:
        raise CorruptEntry(f"it refers to files this run has not made: {', '.join(missing)}")
    touch_used(ctx.entry_dir)
    return dict(result)


def touch_used(entry_dir: Path) -> None:
    """`cache ls` shows when an entry was last used: this file's modification time."""
    with contextlib.suppress(OSError):  # a concurrent clear: nothing to record
        (entry_dir / "used").touch()


def publish(
    ctx: StepContext,
    out_dir: Path,
    result: dict[str, Any],
    files: dict[str, dict[str, Any]],
    build_s: float,
    built_at: float,
) -> bool:
    """Store a built step; False when an entry for the key already exists."""
    root = ctx.root
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{ctx.key[:16]}-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        tmp.mkdir()
        for rel in files:
            _link_or_copy(out_dir / rel, tmp / "files" / rel)
        meta = {
            "format": FORMAT,
            "key": ctx.key,
            "step": ctx.step,
            "model_hash": ctx.components.get("model"),
            "data_hash": ctx.components.get("data"),
            "components": ctx.components,
            "result": portable(result, out_dir, out_dir.parent),
            "files": files,
            "bytes": sum(f["bytes"] for f in files.values()),
            "build_s": round(build_s, 3),
            "created": built_at,
            "built_by_run": out_dir.parent.parent.name,
        }
        (tmp / ENTRY_FILE).write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, ctx.entry_dir)  # atomic: the entry is whole or absent
        except OSError:
            if (ctx.entry_dir / ENTRY_FILE).exists():
                return False  # another run published the same key first: keep theirs
            raise
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def discard(entry_dir: Path) -> None:
    """Remove an entry so that no reader sees half of it: rename away, then delete."""
    trash = entry_dir.with_name(f".trash-{entry_dir.name[:16]}-{secrets.token_hex(3)}")
    try:
        os.rename(entry_dir, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


@dataclass(frozen=True)
class Entry:
    key: str
    step: str
    model_hash: str
    bytes: int
    created: float
    last_used: float
    build_s: float
    built_by_run: str
    path: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def entries(cache_root: Path | None = None) -> list[Entry]:
    """Complete entries, newest first; temporary and half-removed folders are skipped."""
    root = variants_dir(cache_root)
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        if d.name.startswith("."):
            continue
        try:
            meta = json.loads((d / ENTRY_FILE).read_text())
        except (OSError, ValueError):
            continue
        try:
            used = (d / "used").stat().st_mtime
        except OSError:
            used = meta["created"]
        out.append(
            Entry(
                key=meta["key"],
                step=meta["step"],
                model_hash=meta.get("model_hash") or "",
                bytes=int(meta.get("bytes", 0)),
                created=float(meta["created"]),
                last_used=float(used),
                build_s=float(meta.get("build_s", 0.0)),
                built_by_run=meta.get("built_by_run", ""),
                path=str(d),
            )
        )
    return sorted(out, key=lambda e: -e.created)


@dataclass(frozen=True)
class Cleared:
    entries: int
    bytes: int  # the entries' size
    freed: int  # what left the disk now: files not also linked from a run folder
    where: str


def clear(cache_root: Path | None = None) -> Cleared:
    """Remove every entry, and temporary folders left by killed builds."""
    root = variants_dir(cache_root)
    n = size = freed = 0
    if root.is_dir():
        for d in list(root.iterdir()):
            if not d.is_dir():
                continue
            complete = (d / ENTRY_FILE).exists() and not d.name.startswith(".")
            for _, f in _folder_files_all(d):
                with contextlib.suppress(OSError):
                    st = f.stat()
                    if complete and f.parent != d:  # the step's files, not entry.json
                        size += st.st_size
                    if st.st_nlink == 1:
                        freed += st.st_size
            if complete:
                n += 1
                discard(d)
            else:  # a killed build's temporary folder, or a half-removed entry
                shutil.rmtree(d, ignore_errors=True)
    return Cleared(n, size, freed, str(root))


# ---------------------------------------------------------------- step events


def log_event(artifacts_dir: Path, event: dict[str, Any]) -> None:
    """One line per step use in a run; builds of a run are sequential, so the
    orchestrator reads the lines each build added."""
    line = json.dumps(event) + "\n"
    with open(artifacts_dir / EVENTS_FILE, "a") as f:
        f.write(line)


def events_offset(artifacts_dir: Path) -> int:
    try:
        return (artifacts_dir / EVENTS_FILE).stat().st_size
    except OSError:
        return 0


def read_events(artifacts_dir: Path, offset: int) -> list[dict[str, Any]]:
    try:
        with open(artifacts_dir / EVENTS_FILE, "rb") as f:
            f.seek(offset)
            text = f.read().decode()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@dataclass(frozen=True)
class VariantBuild:
    """What building one variant took, from its steps' events."""

    steps: int
    cached: int  # steps taken from the cache by this build
    from_cache: bool | None  # None: nothing to build (e.g. torch eager)
    saved_s: float  # build time of the steps taken from the cache by this build
    original_s: float  # what building all its steps took originally
    built_at: float | None  # when its newest step was built

    def describe(self, vid: str, job_s: float) -> str:
        if self.from_cache is None:
            return f"{vid}: nothing to build ({job_s:.1f} s)"
        if self.from_cache:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.built_at or 0))
            return f"{vid}: from the variant cache (built in {self.original_s:.1f} s on {when})"
        if self.cached:
            return f"built {vid} in {job_s:.1f} s ({self.cached} step(s) from the variant cache)"
        return f"built {vid} in {job_s:.1f} s"


def summarize(events: list[dict[str, Any]]) -> VariantBuild:
    steps = [e for e in events if e.get("outcome") in ("built", "cache", "run")]
    if not steps:
        return VariantBuild(0, 0, None, 0.0, 0.0, None)
    return VariantBuild(
        steps=len(steps),
        cached=sum(e["outcome"] == "cache" for e in steps),
        from_cache=all(e.get("from_cache") for e in steps),
        saved_s=sum(e.get("build_s", 0.0) for e in steps if e["outcome"] == "cache"),
        original_s=sum(e.get("build_s", 0.0) for e in steps),
        built_at=max((e.get("built_at") or 0.0 for e in steps), default=None),
    )


def record_variants(artifacts_dir: Path, artifacts: dict[str, dict[str, Any]]) -> None:
    """Which files each variant of the run is, for `bakeoff export` (merged on resume)."""
    path = artifacts_dir / VARIANTS_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known.update(artifacts)
    _write_atomic(path, json.dumps(known, indent=1))


def iter_steps(artifacts_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(step name, origin) of the steps a run folder holds."""
    if not artifacts_dir.is_dir():
        return
    for d in sorted(artifacts_dir.iterdir()):
        origin = d / ORIGIN_FILE
        if d.is_dir() and origin.exists():
            with contextlib.suppress(OSError, ValueError):
                yield d.name, json.loads(origin.read_text())
