"""bakeoff's front door driven in this process: the `bakeoff` command as its console
script runs it (`bakeoff.cli.main`), and the checks that a refusal is clean: exit 2,
one `error:` line, never a traceback.

In-process, not a subprocess per call: a fuzz test makes hundreds of calls, and an
exception that escapes `main` is exactly what a user would have seen as a traceback,
so it is reported as one (`Traceback`) with the exception's own stack.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff import cli


class Traceback(AssertionError):
    """An exception other than SystemExit escaped `bakeoff.cli.main`: a user would see a
    traceback. Raised by `call` with that exception's stack in its message."""


class Reached(Exception):
    """Raised in place of the step where a command would start working (the run's lock,
    the server's listening socket), once every check of its input has passed."""


def reached(*args: Any, **kwargs: Any) -> Any:
    """A stand-in for the first step of real work: the input was accepted."""
    raise Reached


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    code: int | None  # the exit code; None: the input was accepted (`Reached`)
    stdout: str
    stderr: str

    def accepted(self) -> bool:
        return self.code in (0, None)


def call(*argv: str) -> Outcome:
    """`bakeoff ARGV...` in this process; its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_term = sys.argv, signal.getsignal(signal.SIGTERM)
    sys.argv = ["bakeoff", *argv]
    code: int | None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Reached:
                code = None
            except Exception as exc:
                stack = "".join(traceback.format_exception(exc))
                raise Traceback(
                    f"bakeoff {' '.join(argv)}: {type(exc).__name__} escaped:\n{stack}"
                ) from exc
    finally:
        sys.argv = saved_argv
        signal.signal(signal.SIGTERM, saved_term)
    return Outcome(tuple(argv), code, out.getvalue(), err.getvalue())


def error_line(outcome: Outcome) -> str:
    """The one `error:` line of a clean refusal: exit 2, no traceback, one line that
    says the error (a workload's own list of mistakes may follow it, indented)."""
    where = f"bakeoff {' '.join(outcome.argv)}: exit {outcome.code}\n{outcome.stderr}"
    assert outcome.code == 2, where
    assert "Traceback" not in outcome.stderr, where
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, where
    assert errors[0].removeprefix("error:").strip(), where
    return errors[0]


def refused_in_one_line(outcome: Outcome, *names: str) -> str:
    """A refusal whose whole message is the last line of stderr and names `names`."""
    line = error_line(outcome)
    assert outcome.stderr.rstrip("\n").splitlines()[-1] == line, outcome.stderr
    for name in names:
        assert name in line, (name, line)
    return line


def clean(outcome: Outcome) -> None:
    """Accepted (a mutated input may still be valid), or refused cleanly."""
    if not outcome.accepted():
        error_line(outcome)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def write_export(folder: Path) -> dict:
    """An export folder as `bakeoff export` writes one for ONNX Runtime (its model file
    is never loaded here: the server stops before it listens)."""
    folder.mkdir()
    model = b"an ONNX model's bytes"
    (folder / "model.onnx").write_bytes(model)
    measured = [
        {"candidate": f"onnxruntime-fp32-b{b}", "batch_size": b, "p50_ms": 0.1 * b,
         "p99_ms": 0.2 * b, "samples_per_s": 9000.0 * b ** 0.5, "offline_streams": None,
         "offline_samples_per_s": None}
        for b in (1, 4)
    ]  # fmt: skip
    manifest = {
        "format": 1,
        "run_id": "20260101-000000-abcd",
        "workload": "tiny",
        "candidate": "onnxruntime-fp32-b1",
        "runtime": "onnxruntime",
        "precision": "fp32",
        "batch_size": 1,
        "file": "model.onnx",
        "threads": 2,
        "load": {
            "intra_op_num_threads": 2,
            "inter_op_num_threads": 1,
            "graph_optimization_level": "all",
            "allow_spinning": "default",
        },
        "inputs": [{"name": "input", "dtype": "float32", "shape": [1, 64], "batch_axis": 0}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": [1, 10]}],
        "text": None,
        "measured_by_batch_size": measured,
        "files": {"model.onnx": {"sha256": hashlib.sha256(model).hexdigest(), "bytes": len(model)}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def run_in_child(folder: Path, sitecustomize: str, *argv: str) -> dict[str, Any]:
    """`bakeoff run ... --json` in a child process whose Python (and every worker it
    starts) first runs `sitecustomize` (what a machine without a package, or with a
    broken one, looks like); its document, after it exited 0."""
    hook = folder / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(sitecustomize)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), *sys.path])}
    doc_path = folder / "r.json"
    cli_main = "import sys; from bakeoff.cli import main; sys.argv[0] = 'bakeoff'; main()"
    done = subprocess.run(
        [sys.executable, "-c", cli_main, "run", *argv, "--json", str(doc_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(doc_path.read_text()), "said": done.stdout + done.stderr}


_BREAKS_ON_IMPORT = """
import importlib.util
import sys


class BreakOnImport:
    def find_spec(self, name, path=None, target=None):
        if name != {module!r}:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)

            def broken(*args, **kwargs):
                raise {error}

            *parents, last = {attribute!r}.split(".")
            owner = module
            for part in parents:
                owner = getattr(owner, part)
            setattr(owner, last, broken)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, BreakOnImport())
"""


def breaks_on_import(module: str, attribute: str, error: str) -> str:
    """A sitecustomize for `run_in_child`: once `module` is imported, its `attribute`
    (dotted) raises `error` (an expression), as a broken or older library would."""
    return _BREAKS_ON_IMPORT.format(module=module, attribute=attribute, error=error)
