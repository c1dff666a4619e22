"""Every ONNX file bakeoff writes is checked before it is offered: the ONNX checker
(full, with shape inference) and a load by ONNX Runtime. A quantizer that writes a
graph its own runtime refuses (per-channel DequantizeLinear in an opset-12 graph, as
on PaddleOCR's detector) is caught in the build step, where it can be retried with
other settings, instead of failing the candidate's load."""

from __future__ import annotations

import functools
from pathlib import Path


def _first_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split()).rstrip(".")
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


@functools.lru_cache(maxsize=8)
def _passes_full_check(path: str, mtime: float) -> bool:
    """Whether a file passes the checker's full check (the source model, once)."""
    return checker_problem(path, full=True) is None


def checker_problem(path: str | Path, full: bool = True) -> str | None:
    """The ONNX checker's complaint about the file at `path`, or None."""
    import onnx

    try:
        # By path: a model over 2 GB (external data) cannot be checked in memory.
        onnx.checker.check_model(str(path), full_check=full)
    except Exception as exc:
        return f"onnx.checker: {type(exc).__name__}: {_first_line(exc)}"
    return None


def load_problem(path: str | Path) -> str | None:
    """ONNX Runtime's refusal to load the file at `path` (CPU), or None."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"ONNX Runtime refuses to load it: {type(exc).__name__}: {_first_line(exc)}"
    return None


def written_problem(written: str | Path, source: str | Path) -> str | None:
    """What is wrong with the ONNX file a step wrote from `source`, or None. The full
    check (strict shape inference) applies where the source passes it: a model that
    was already outside it is checked without it, so only what the step broke counts."""
    full = _passes_full_check(str(source), Path(source).stat().st_mtime)
    return checker_problem(written, full) or load_problem(written)


def refuse_invalid(step: str, written: str | Path, source: str | Path, advice: str) -> None:
    """The build step fails, named, where the file it wrote is not a valid model."""
    from bakeoff.transforms import StepFailed

    problem = written_problem(written, source)
    if problem is not None:
        raise StepFailed(f"{step} wrote an invalid model: {problem}. {advice}")
