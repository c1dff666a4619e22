"""Export, convert and quantize steps. Each runs in a build process and caches its
output under the run's artifacts folder, so variants that share a step (the ONNX
export feeds ONNX Runtime and OpenVINO) build it once. A failed step is cached
too, with its reason, so dependents fail fast with the same explanation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


class StepFailed(Exception):
    """A build step failed; the message is the reason shown to the user."""


def cached_step(
    artifacts_dir: str, name: str, build: Callable[[Path], dict[str, Any]]
) -> dict[str, Any]:
    """Run `build(out_dir)` once per run; later callers get the recorded result or failure."""
    out_dir = Path(artifacts_dir) / name
    done, failed = out_dir / "step.json", out_dir / "failed.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    if failed.exists():
        raise StepFailed(json.loads(failed.read_text())["reason"])
    if out_dir.exists():  # a half-built step from an interrupted build
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    try:
        result = build(out_dir)
    except Exception as exc:
        reason = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
        failed.write_text(json.dumps({"reason": reason}))
        raise StepFailed(reason) from exc
    done.write_text(json.dumps(result))
    return result
