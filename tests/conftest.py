"""Test isolation: nothing may be written outside temp dirs.

Keras, Ray, OpenVINO, ONNX Runtime, matplotlib, Hypothesis and the Hugging Face stack
like to write under ~ (or the working folder), and TensorFlow's autograph and our own
workers' compile caches under the system temp dir; HOME, TMPDIR and the cache
locations point into a session temp dir, and workers inherit the same environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The fake runtime and model kind are hidden from users; the suite uses them (set at
# import, before any test module lists runtimes, and inherited by every subprocess).
os.environ["BAKEOFF_DEV"] = "1"


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("home")
    os.environ["HOME"] = str(home)
    scratch = home / "tmp"
    scratch.mkdir()
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)  # gettempdir() has read TMPDIR already
    os.environ["XDG_CACHE_HOME"] = str(home / ".cache")
    os.environ["BAKEOFF_CACHE_DIR"] = str(home / "bakeoff-cache")
    os.environ["HF_HUB_OFFLINE"] = "1"
    # No GEMM peak in the suite's many short runs (about 4 s of CPU each); the tests
    # of the figure itself turn it back on (`gemm_peak`).
    os.environ[GEMM_PEAK] = "off"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(home / "inductor")
    os.environ["KERAS_HOME"] = str(home / ".keras")
    os.environ["MPLCONFIGDIR"] = str(home / "matplotlib")  # its font cache (the report's charts)
    # schemathesis' Hypothesis keeps a cache of constants in ./.hypothesis otherwise
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home / "hypothesis")
    _take_the_sessions_digits_weights(tmp_path_factory, home / "bakeoff-cache")


def _made_once_per_session(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]
) -> Path:
    """A folder the pytest workers of one session share (in their temp folders' common
    parent): the first calls `make(folder)` under a lock, the others wait and take it."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "ready").exists():
            make(folder)
            (folder / "ready").touch()
    return folder


def _take_the_sessions_digits_weights(
    tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> None:
    """builtin:digits trains its CNN on first use in each cache (about 6 s of CPU), and
    each pytest worker has a cache of its own: the session trains it once, in a child
    process (this one imports no framework), and each worker's cache starts with a copy.
    The training itself is the product's (`digits.train_if_needed`), deterministic."""
    import shutil

    def train(folder: Path) -> None:
        subprocess.run(
            [sys.executable, "-c", "from bakeoff.builtins import digits; digits.train_if_needed()"],
            env={**os.environ, "BAKEOFF_CACHE_DIR": str(folder)},
            check=True,
            capture_output=True,
            timeout=600,
        )

    shared = _made_once_per_session(tmp_path_factory, "digits-weights", train)
    cache.mkdir(parents=True, exist_ok=True)
    for weights in shared.glob("*.safetensors"):
        shutil.copy2(weights, cache / weights.name)


# bakeoff.efficiency.PEAK_VARIABLE (a string here: conftest imports no bakeoff module)
GEMM_PEAK = "BAKEOFF_GEMM_PEAK"


@pytest.fixture
def gemm_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMM peak measured, as outside the test suite."""
    monkeypatch.delenv(GEMM_PEAK, raising=False)


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SavedModel and a Keras file, written once per session (tests/tf_models.py)."""
    from extras import require_module
    from tf_models import write_tf_models

    # make test installs it: under CI=true a missing TensorFlow fails, not skips
    require_module("tensorflow", "pip install 'bakeoff[frameworks]'")
    return _made_once_per_session(tmp_path_factory, "tf-models", write_tf_models)


@pytest.fixture(scope="session")
def triton_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only tritonclient (http, and grpc for Triton's model-config schema,
    `tritonclient.grpc.model_config_pb2`) and numpy: its ml-dtypes pin clashes with the
    frameworks'. Made once per test session (shared by its xdist workers) from the same package
    index; our own uv (or pip) fills it (`--python`): no pip of its own to install,
    nothing byte-compiled that the client never imports."""

    def make(venv: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)],
            check=True,
            timeout=120,
        )
        # uv, which make installs beside our Python, fills it in about a second
        # where pip took a minute; pip where there is no uv. Its cache stays in tmp.
        uv = Path(sys.executable).with_name("uv")
        installer = (
            [str(uv), "pip", "install", "--cache-dir", str(venv.parent / "uv-cache")]
            if uv.exists()
            else [sys.executable, "-m", "pip", "install"]
        )
        pip = subprocess.run(
            [
                *installer,
                "--python",
                str(venv / "bin" / "python"),
                "--quiet",
                "--no-compile",
                "tritonclient[http,grpc]==2.73.0",
                "numpy==2.4.6",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert pip.returncode == 0, pip.stderr[-3000:]

    python = _made_once_per_session(tmp_path_factory, "tritonclient-venv", make) / "bin" / "python"
    return python


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "bakeoff.db"


@pytest.fixture
def digits_train_spec(tmp_path: Path) -> Callable[..., Any]:
    """A factory of `TrainSpec`s on the digits recipe's data and seed-0 initial
    weights, written once into the test's temp dir; keywords override fields."""

    def make(**fields: Any) -> Any:
        import numpy as np
        import torch
        from safetensors.torch import save_file

        from bakeoff.builtins import digits
        from bakeoff.stacks.spec import TrainSpec

        data, init = tmp_path / "d.npz", tmp_path / "init.safetensors"
        if not init.exists():
            x_train, y_train, x_val, y_val = digits.train_and_validation()
            np.savez(data, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
            torch.manual_seed(0)
            save_file(digits.untrained().state_dict(), str(init))
        defaults: dict[str, Any] = {
            "stack": "torch",
            "factory": "bakeoff.builtins.digits:untrained",
            "init_path": str(init),
            "data_path": str(data),
            "seed": 0,
            "batch_size": 64,
            "lr": 2e-3,
            "threads": 1,
        }
        return TrainSpec(**{**defaults, **fields})

    return make


# The longest files first (seconds of wall time in make test, measured): with
# `--dist loadfile` a worker takes the next file when it finishes one, so files in
# alphabetical order left the training pipeline's tests (the longest) to start last,
# and make test's end ran on one worker while the others idled. Longest first keeps
# every worker busy to the end. Files not named keep their places after these.
LONGEST_FILES_FIRST = (
    "training/test_pipeline.py",
    "end_to_end/test_real_runtimes.py",
    "distributed/test_ranks.py",
    "trials/test_racing.py",
    "cluster/test_sweep.py",
    "serve/test_app.py",
    "export/test_writer.py",
    "inference/test_split.py",
    "end_to_end/test_keras_litert.py",
    "generation/test_pipeline.py",
    "transforms/test_openvino_convert.py",
    "generators/test_generators.py",
    "export/test_triton_tfserving.py",
    "end_to_end/test_lora_training.py",
    "backends/test_jax_tensorflow.py",
    "test_source.py",
    "workload/test_datasets_source.py",
    "training/test_progress.py",
    "backends/test_tvm.py",
    "transforms/test_ort_quantize.py",
    "end_to_end/test_framework_training.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    # sorted() is stable: the tests of one file keep their order
    items.sort(key=lambda item: rank.get(_under_tests(item.path), len(rank)))


def _under_tests(path: Path) -> str:
    """A test file's path below tests/ (file names repeat: each package has its own)."""
    return path.relative_to(Path(__file__).parent).as_posix()
