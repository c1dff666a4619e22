"""Where the variant cache keeps things, and the writes it shares between modules.

Layout: ``<cache dir>/variants/<key>/entry.json`` plus ``files/`` (the step's
output folder). A run's artifacts folder holds its base key (`KEY_FILE`), one
event per step use (`EVENTS_FILE`) and which artifact each variant is
(`VARIANTS_FILE`); each step's run folder says where its files came from
(`ORIGIN_FILE`).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FORMAT = 1
KEY_FILE = "cache_key.json"  # in a run's artifacts folder: the run's base key
EVENTS_FILE = "steps.jsonl"  # in a run's artifacts folder: one line per step use
ORIGIN_FILE = "origin.json"  # in a step's run folder: built here or from the cache
VARIANTS_FILE = "variants.json"  # in a run's artifacts folder: artifact per variant
ENTRY_FILE = "entry.json"
DISABLE_ENV = "BAKEOFF_VARIANT_CACHE"  # "off" (or 0/false/no) turns the cache off


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "on").strip().lower() not in ("0", "off", "false", "no")


def variants_dir(cache_root: Path | None = None) -> Path:
    if cache_root is None:
        from bakeoff.paths import cache_dir

        cache_root = cache_dir()
    return cache_root / "variants"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _folder_files_all(folder: Path) -> list[tuple[str, Path]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            out.append((path.relative_to(folder).as_posix(), path))
    return out
