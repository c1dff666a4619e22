"""One build step's use of the cache: look it up, take a hit's files, publish a build.

An entry appears by renaming a finished temporary folder, so a killed build
never leaves a half entry that looks complete, and of two runs that publish
the same key at once the second simply keeps the first's. A hit hard-links
the files into the run's own folder (copies across file systems): a run folder
always holds its artifacts itself, so `bakeoff cache clear` never breaks
`bakeoff export` or `--resume` of an earlier run, and on one file system no
space is used twice. Every file's sha256 is checked before a hit is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.cache.keys import sha256_file, step_key
from bakeoff.cache.layout import ENTRY_FILE, FORMAT, KEY_FILE, _folder_files_all

_STEP_REF = "bakeoff-cache://step/"
_RUN_REF = "bakeoff-cache://artifacts/"


class CorruptEntry(Exception):
    """A cache entry whose files are missing or differ from their recorded sha256."""


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
