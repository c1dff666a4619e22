"""What a run's builds did: its steps' events (``steps.jsonl``), their summary per
variant, and which artifact each variant is (``variants.json``)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.cache.layout import EVENTS_FILE, ORIGIN_FILE, VARIANTS_FILE, _write_atomic

# Set in a build process to the variant it builds: builds of a run run side by
# side, so each step event names its build and the orchestrator reads its own.
BUILD_VARIABLE = "BAKEOFF_BUILD"


def log_event(artifacts_dir: Path, event: dict[str, Any]) -> None:
    """One line per step use in a run, appended (one write of one short line, so
    lines of builds running side by side do not mix)."""
    build = os.environ.get(BUILD_VARIABLE)
    line = json.dumps({**event, "build": build} if build else event) + "\n"
    with open(artifacts_dir / EVENTS_FILE, "a") as f:
        f.write(line)


def events_offset(artifacts_dir: Path) -> int:
    try:
        return (artifacts_dir / EVENTS_FILE).stat().st_size
    except OSError:
        return 0


def read_events(artifacts_dir: Path, offset: int, build: str | None = None) -> list[dict[str, Any]]:
    """The events after `offset`; with `build`, only that build's."""
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
    return [e for e in out if build is None or e.get("build") == build]


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
