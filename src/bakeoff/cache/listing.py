"""The entries in the cache as a whole: `bakeoff cache ls` and `bakeoff cache clear`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.cache.layout import ENTRY_FILE, _folder_files_all, variants_dir
from bakeoff.cache.steps import discard


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
