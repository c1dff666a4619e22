"""A fuzz test of the front door: valid workload TOMLs, .npz data files, export
manifests and Open Inference Protocol requests, damaged (`mutations`), must be
refused with exit 2 and an `error:` line, or a 4xx with a JSON error, and never with
a traceback or a 5xx; and nothing is written anywhere but the test's own folder.

A damaged input that happens to be valid is fine: the command then gets as far as
its first real work, where it stops (`front_door.Reached`). A fixed number of
examples, drawn the same way every run (derandomize): never flaky, a few seconds.
The last tests show the harness catches a traceback and a 5xx planted on purpose.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bakeoff.serve
from bakeoff import lifecycle, loader
from bakeoff.serve import ServedSpec, ServeSettings, Serving, TensorSpec, create_app, protocol
from bakeoff.serve.model import Runner
from front_door import Traceback, call, clean, files_under, reached, write_export
from mutations import damaged_bytes, damaged_document, to_toml

ROOT = Path(__file__).resolve().parents[2]


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- the inputs, valid -------------------------------------------------------------------

FAKE_MODEL = {"kind": "fake", "options": {"latency_ms": 1.0}}
WORKLOADS: list[tuple[str, dict[str, Any]]] = [
    ("run", {"name": "plain", "model": FAKE_MODEL, "data": {"path": "d.npz"}}),
    (
        "run",
        {
            "name": "searched",
            "description": "every section",
            "model": FAKE_MODEL,
            "data": {"path": "d.npz", "quality_samples": 16},
            "quality": {"metric": "cosine", "max_drop": 0.05},
            "search": {
                "runtimes": ["fake"],
                "precisions": ["fp32", "int8"],
                "batch_sizes": [1, 4],
                "objective": "latency",
                "threads": 1,
                "margin": 0.03,
                "ci_target": 0.05,
            },
            "constraints": {"max_p50_ms": 10.0, "max_model_size_mb": 100.0},
        },
    ),
    (
        "run",
        {
            "name": "axes",
            "model": FAKE_MODEL,
            "data": {
                "path": "axes.npz",
                "batch_axes": {"state": 1},
                "constants": ["scale"],
                "variable_axes": {"input": [1]},
            },
            "candidates": [
                {"label": "a", "runtime": "fake", "precision": "fp32", "batch_sizes": [1, 2]},
                {"label": "b", "runtime": "fake", "precision": "int8", "options": {"x": 1}},
            ],
        },
    ),
    (
        "run",
        {
            "name": "labelled",
            "model": FAKE_MODEL,
            "data": {"path": "labelled.npz"},
            "quality": {"metric": "accuracy", "max_drop": 0.01},
        },
    ),
    (
        "train",
        {
            "name": "recipe",
            "model": {"kind": "torch", "factory": "m:build"},
            "train": {
                "data": "t.npz",
                "lr": 0.001,
                "steps": 10,
                "eval_every": 5,
                "batch_size": 8,
                "target": {"value": 0.9},
                "stacks": ["torch", "ddp"],
                "schedule": "cosine",
                "warmup_steps": 2,
            },
        },
    ),
]


def _arrays() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return {
        "d.npz": {"input": rng.random((32, 8), np.float32)},
        "axes.npz": {
            "input": rng.random((32, 6), np.float32),
            "state": rng.random((2, 32, 4), np.float32),
            "scale": np.float32(2.0),
        },
        "labelled.npz": {
            "input": rng.random((32, 8), np.float32),
            "labels": rng.integers(0, 3, 32),
        },
        "t.npz": {
            "x_train": rng.random((16, 8), np.float32),
            "y_train": rng.integers(0, 3, 16),
            "x_val": rng.random((8, 8), np.float32),
            "y_val": rng.integers(0, 3, 8),
        },
    }


def _npz(arrays: dict[str, Any], compressed: bool = False) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


class Door:
    """The test's folder, holding the valid inputs; each example writes its damaged one
    over one of them, runs the command and checks that nothing else was written."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for name, arrays in _arrays().items():
            (folder / name).write_bytes(_npz(arrays))
        for i, (_, doc) in enumerate(WORKLOADS):
            (folder / f"w{i}.toml").write_text(to_toml(doc))
        self.manifest = write_export(folder / "exp")
        self.files = files_under(folder)

    def run(self, writes: dict[str, bytes], *argv: str) -> None:
        saved = {name: (self.folder / name).read_bytes() for name in writes}
        for name, data in writes.items():
            (self.folder / name).write_bytes(data)
        try:
            outcome = call(*argv, "--store", "store/b.db")
            clean(outcome)
            written = files_under(self.folder) - self.files
            if outcome.accepted():  # a training run makes its store's folder before its lock
                written -= {"store"}
            assert not written, f"bakeoff {' '.join(argv)} wrote {sorted(written)}"
        finally:
            for name, data in saved.items():
                (self.folder / name).write_bytes(data)
            # so that the next example (hypothesis shrinking a failure) starts clean
            for extra in sorted(files_under(self.folder) - self.files, reverse=True):
                path = self.folder / extra
                path.rmdir() if path.is_dir() else path.unlink()


@pytest.fixture
def door(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Door]:
    """The folder, the working folder too; commands stop at their first real work. And
    nothing may appear in the checkout, where a relative path would land otherwise."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lifecycle, "hold_run_lock", reached)
    monkeypatch.setattr(bakeoff.serve, "serve", reached)
    checkout = sorted(os.listdir(ROOT))
    yield Door(tmp_path)
    assert sorted(os.listdir(ROOT)) == checkout


def test_the_valid_inputs_are_accepted(door: Door) -> None:
    """Else the fuzz tests would only ever damage inputs that fail anyway."""
    for i, (command, _) in enumerate(WORKLOADS):
        assert call(command, f"w{i}.toml", "--store", "store/b.db").code is None, i
    assert call("serve", "exp", "--port", "0").code is None


# -- workload TOMLs ----------------------------------------------------------------------

CHOICES = st.integers(0, len(WORKLOADS) - 1)


@st.composite
def damaged_workload(draw: st.DrawFn) -> tuple[int, bytes]:
    i = draw(CHOICES)
    doc = WORKLOADS[i][1]
    if draw(st.booleans()):
        return i, to_toml(draw(damaged_document(doc))).encode()
    return i, draw(damaged_bytes(to_toml(doc).encode()))


def workload_property(door: Door, examples: int) -> Callable[[], None]:
    @fuzz(examples)
    @given(damaged_workload())
    def prop(case: tuple[int, bytes]) -> None:
        i, text = case
        door.run({f"w{i}.toml": text}, WORKLOADS[i][0], f"w{i}.toml")

    return prop


def test_damaged_workload_tomls_are_refused_cleanly(door: Door) -> None:
    workload_property(door, 160)()


# -- data files --------------------------------------------------------------------------

DTYPES = ["int8", "uint8", "int64", "float16", "float64", "bool", "complex64", "U3", "S2",
          "datetime64[s]", "V4", "object"]  # fmt: skip


@st.composite
def damaged_arrays(draw: st.DrawFn, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    out = dict(arrays)
    for _ in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(sorted(out) or ["input"]))
        op = draw(st.sampled_from(["dtype", "shape", "drop", "add", "rename", "nan"]))
        array = np.asarray(out.get(name, np.zeros(3)))
        if op == "dtype":
            dtype = draw(st.sampled_from(DTYPES))
            try:
                out[name] = array.astype(dtype)
            except (TypeError, ValueError):  # no cast there (floats to datetimes, voids)
                out[name] = np.zeros(array.shape, dtype)
        elif op == "shape":
            shape = draw(st.lists(st.integers(0, 40), max_size=4))
            out[name] = np.resize(array, shape)
        elif op == "drop":
            out.pop(name, None)
        elif op == "add":
            out[draw(st.sampled_from(["labels", "extra", "x_val", "input"]))] = np.zeros(
                draw(st.lists(st.integers(0, 33), max_size=3))
            )
        elif op == "rename":
            out[draw(st.sampled_from(["labels", "other", ""]))] = out.pop(name, array)
        elif array.dtype.kind == "f":
            out[name] = np.full(array.shape, np.nan, array.dtype)
    return out


NPZ_FILES = sorted(_arrays())
COMMANDS = {"d.npz": (0, "run"), "axes.npz": (2, "run"), "labelled.npz": (3, "run")}
COMMANDS["t.npz"] = (4, "train")


@st.composite
def damaged_npz(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(NPZ_FILES))
    arrays = _arrays()[name]
    if draw(st.booleans()):
        return name, _npz(draw(damaged_arrays(arrays)), compressed=draw(st.booleans()))
    return name, draw(damaged_bytes(_npz(arrays, compressed=draw(st.booleans()))))


def test_damaged_npz_data_files_are_refused_cleanly(door: Door) -> None:
    @fuzz(160)
    @given(damaged_npz())
    def prop(case: tuple[str, bytes]) -> None:
        name, data = case
        i, command = COMMANDS[name]
        door.run({name: data}, command, f"w{i}.toml")

    prop()


# -- export manifests --------------------------------------------------------------------


@st.composite
def damaged_manifest(draw: st.DrawFn, manifest: dict[str, Any]) -> bytes:
    if draw(st.booleans()):
        return json.dumps(draw(damaged_document(manifest))).encode()
    return draw(damaged_bytes(json.dumps(manifest, indent=1).encode()))


def test_damaged_export_manifests_are_refused_cleanly(door: Door) -> None:
    @fuzz(120)
    @given(damaged_manifest(door.manifest))
    def prop(data: bytes) -> None:
        door.run({"exp/manifest.json": data}, "serve", "exp", "--port", "0")

    prop()


# -- Open Inference Protocol requests ----------------------------------------------------


class Model:
    """x FP32 [-1, 4] and ids INT64 [-1, 3] by row, scale FP32 [1] for every call; it
    answers any input it is given, so a 5xx can only be the server's own fault."""

    spec = ServedSpec(
        name="m",
        platform="test_m",
        inputs=[
            TensorSpec("x", "FP32", (-1, 4)),
            TensorSpec("ids", "INT64", (-1, 3)),
            TensorSpec("scale", "FP32", (1,), batch_axis=None),
        ],
        outputs=[TensorSpec("y", "FP32", (-1, 4)), TensorSpec("n", "INT64", (-1, 1))],
        threads=1,
    )

    def load(self, threads: int) -> Runner:
        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            with np.errstate(all="ignore"):
                y = inputs["x"] * inputs["scale"]
            return {"y": y, "n": inputs["ids"].sum(axis=1, keepdims=True)}

        return run


def _requests() -> list[tuple[dict[str, Any], bytes]]:
    """Valid requests: (JSON header, binary tail); an empty tail is a JSON-only request."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    scale = np.float32([2.0])
    as_json = {
        "id": "r1",
        "inputs": [
            {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.tolist()},
            {"name": "ids", "shape": [2, 3], "datatype": "INT64", "data": ids.ravel().tolist()},
            {"name": "scale", "shape": [1], "datatype": "FP32", "data": [2.0]},
        ],
        "outputs": [{"name": "y"}, {"name": "n", "parameters": {"binary_data": True}}],
    }
    blobs = [x.tobytes(), ids.tobytes(), scale.tobytes()]
    binary = {
        "inputs": [
            {"name": n, "shape": s, "datatype": d, "parameters": {"binary_data_size": len(b)}}
            for (n, s, d), b in zip(
                [("x", [2, 4], "FP32"), ("ids", [2, 3], "INT64"), ("scale", [1], "FP32")],
                blobs,
                strict=True,
            )
        ],
        "parameters": {"binary_data_output": True},
    }
    return [(as_json, b""), (binary, b"".join(blobs))]


@st.composite
def damaged_request(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    header, tail = draw(st.sampled_from(_requests()))
    if draw(st.booleans()):
        header = draw(damaged_document(header))
    head = json.dumps(header).encode()
    body = head + tail
    length: int | str | None = len(head) if tail else None
    if draw(st.booleans()):
        body = draw(damaged_bytes(body))
    if draw(st.integers(0, 4)) == 0:
        length = draw(st.one_of(st.none(), st.integers(-5, len(body) + 5), st.just("12a")))
    headers = {} if length is None else {"Inference-Header-Content-Length": str(length)}
    return body, headers


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """The app in this process, ready: its model loaded and warmed up, its batcher running."""
    from starlette.testclient import TestClient

    serving = Serving(Model(), ServeSettings(max_batch_size=4, max_body_mb=1))
    ready = threading.Event()
    serving.on_ready = ready.set
    with TestClient(create_app(serving)) as client:
        assert client.portal is not None
        client.portal.call(serving.start_loading)
        assert ready.wait(60) and serving.failed is None, serving.failed
        yield client


def answered_cleanly(response: Any) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        error = response.json().get("error")
        assert isinstance(error, str) and error, response.text


def request_property(server: Any, examples: int) -> Callable[[], None]:
    @fuzz(examples)
    @given(damaged_request(), st.sampled_from(["m", "m/versions/1", "m/versions/2", "n"]))
    def prop(request: tuple[bytes, dict[str, str]], model: str) -> None:
        body, headers = request
        answered_cleanly(server.post(f"/v2/models/{model}/infer", content=body, headers=headers))

    return prop


def test_valid_requests_are_answered(server: Any) -> None:
    for header, tail in _requests():
        head = json.dumps(header).encode()
        headers = {"Inference-Header-Content-Length": str(len(head))} if tail else {}
        response = server.post("/v2/models/m/infer", content=head + tail, headers=headers)
        assert response.status_code == 200, response.text


def test_damaged_requests_get_a_4xx_never_a_5xx(server: Any) -> None:
    request_property(server, 250)()


# -- the harness catches what it is there to catch ---------------------------------------


def test_a_planted_traceback_is_caught(door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
    real = loader.parse_spec_file

    def planted(path: Path, origin: str | None = None) -> Any:
        if len(path.read_bytes()) % 2:  # about half the inputs: a bug only some files hit
            raise KeyError("planted")
        return real(path, origin)

    monkeypatch.setattr(loader, "parse_spec_file", planted)
    with pytest.raises(Traceback, match="KeyError: 'planted'"):
        workload_property(door, 20)()


def test_a_planted_server_error_is_caught(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = protocol.parse_infer_request

    def planted(body: bytes, header_length: int | None) -> Any:
        if len(body) % 2:
            raise KeyError("planted")
        return real(body, header_length)

    monkeypatch.setattr(protocol, "parse_infer_request", planted)
    with pytest.raises(AssertionError, match="500"):
        request_property(server, 20)()
