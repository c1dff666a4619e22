"""Export, convert and quantize steps. Each runs in a build process and keeps its
output under the run's artifacts folder, so variants that share a step (the ONNX
export feeds ONNX Runtime and OpenVINO) build it once. When the run has a
variant cache key (see `bakeoff.cache`), a step built by an earlier run with
the same model, data, libraries and bakeoff is taken from the cache instead,
and a step built here is stored there. A failed step is kept too, with its
reason, but only for this run, so dependents fail fast with the same
explanation and the next run tries again."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bakeoff import cache


class StepFailed(Exception):
    """A build step failed; the message is the reason shown to the user."""


def step_failed(step: str, exc: BaseException, advice: str, context: str = "") -> StepFailed:
    """A library's error in plain words: which step failed (`step` names the library
    call), the library's own message, `context` (what was done to the model first)
    and what the user can try. The whole message goes to the build log."""
    print(f"--- {step}: {type(exc).__name__} ---\n{exc}", file=sys.stderr)
    text = " ".join(str(exc).split()).rstrip(".")
    if len(text) > 400:
        text = text[:400].rstrip() + " [...]"  # the rest is in the build log
    return StepFailed(f"{step} failed: {type(exc).__name__}: {text}{context}. {advice}")


class StepNotNeeded(Exception):
    """A variant that another variant makes unnecessary here: its candidates are
    left out of the run (listed under `settings.left_out` with the message as the
    why, not as candidate rows), or, in a generative run, unavailable with it.
    Mostly decided before any step is cached; a step whose own tool finds it would
    add nothing (NNCF's AWQ finding no layer to scale) raises it as it runs, and
    its later callers in the run get it too."""


def cached_step(
    artifacts_dir: str, name: str, build: Callable[[Path], dict[str, Any]]
) -> dict[str, Any]:
    """Run `build(out_dir)` once per run, or take its output from the variant cache;
    later callers in the run get the recorded result or failure.

    `name` must be unique per distinct output: it is the step's identity in the
    cache key (with the model, calibration data and library versions).
    """
    run_dir = Path(artifacts_dir)
    # Builds run side by side and share steps (the ONNX export feeds ONNX Runtime
    # and OpenVINO): one builds the step, the others wait and then reuse it.
    with _step_lock(run_dir, name):
        return _cached_step(run_dir, name, build)


@contextmanager
def _step_lock(run_dir: Path, name: str) -> Iterator[None]:
    import fcntl

    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / f".{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _cached_step(
    run_dir: Path, name: str, build: Callable[[Path], dict[str, Any]]
) -> dict[str, Any]:
    out_dir = run_dir / name
    done, failed = out_dir / "step.json", out_dir / "failed.json"
    if done.exists():
        origin = _read(out_dir / cache.ORIGIN_FILE)
        _event(run_dir, name, "run", origin, "reused from this run")
        return dict(json.loads(done.read_text()))
    if failed.exists():
        record = json.loads(failed.read_text())
        if record.get("not_needed"):
            raise StepNotNeeded(record["reason"])
        cache.log_event(run_dir, {"step": name, "outcome": "failed"})
        raise StepFailed(record["reason"])
    if out_dir.exists():  # a half-built step from an interrupted build
        shutil.rmtree(out_dir)
    ctx = cache.step_context(run_dir, name)
    if ctx is not None:
        hit = _from_cache(ctx, out_dir)
        if hit is not None:
            return hit
    out_dir.mkdir(parents=True)
    print(f"[bakeoff] step {name}: building", flush=True)
    built_at, t0 = time.time(), time.perf_counter()
    try:
        result = build(out_dir)
    except StepNotNeeded as exc:  # the step's own tool found it would add nothing
        failed.write_text(json.dumps({"reason": str(exc), "not_needed": True}))
        cache.log_event(run_dir, {"step": name, "outcome": "not needed"})
        raise
    except Exception as exc:
        reason = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
        failed.write_text(json.dumps({"reason": reason}))
        cache.log_event(run_dir, {"step": name, "outcome": "failed"})
        raise StepFailed(reason) from exc
    build_s = time.perf_counter() - t0
    files = cache.file_digests(out_dir)
    origin = {
        "from_cache": False,
        "key": ctx.key if ctx else None,
        "build_s": round(build_s, 3),
        "built_at": built_at,
        "files": files,
    }
    (out_dir / cache.ORIGIN_FILE).write_text(json.dumps(origin, indent=1))
    done.write_text(json.dumps(result))  # last: its presence means the step is whole
    note = "not cached (the run has no cache key)"
    if ctx is not None:
        try:
            stored = cache.publish(ctx, out_dir, result, files, build_s, built_at)
            if stored:
                note = f"stored in the variant cache as {ctx.key[:12]}"
            else:
                note = f"the variant cache already had {ctx.key[:12]} (built concurrently)"
        except OSError as exc:  # a full or read-only cache must not fail the build
            note = f"not stored in the variant cache: {exc}"
    _event(run_dir, name, "built", origin, f"built in {build_s:.1f} s; {note}")
    return result


def _from_cache(ctx: cache.StepContext, out_dir: Path) -> dict[str, Any] | None:
    meta = cache.lookup(ctx)
    if meta is None:
        return None
    try:
        out_dir.mkdir(parents=True)
        result = cache.materialize(ctx, meta, out_dir)
    except (cache.CorruptEntry, OSError) as exc:
        if isinstance(exc, cache.CorruptEntry):
            cache.discard(ctx.entry_dir)
        print(f"[bakeoff] step {ctx.step}: cache entry {ctx.key[:12]} not used: {exc}", flush=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    origin = {
        "from_cache": True,
        "key": ctx.key,
        "build_s": meta["build_s"],
        "built_at": meta["created"],
        "files": meta["files"],
    }
    (out_dir / cache.ORIGIN_FILE).write_text(json.dumps(origin, indent=1))
    (out_dir / "step.json").write_text(json.dumps(result))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta["created"]))
    note = f"from the variant cache {ctx.key[:12]} (built in {meta['build_s']:.1f} s on {when})"
    _event(out_dir.parent, ctx.step, "cache", origin, note)
    return result


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _event(run_dir: Path, name: str, outcome: str, origin: dict[str, Any], note: str) -> None:
    # The build log says what happened to every step; the orchestrator reads the events.
    print(f"[bakeoff] step {name}: {note}", flush=True)
    cache.log_event(
        run_dir,
        {
            "step": name,
            "outcome": outcome,
            "from_cache": bool(origin.get("from_cache")),
            "build_s": origin.get("build_s", 0.0),
            "built_at": origin.get("built_at"),
            "key": origin.get("key"),
        },
    )
