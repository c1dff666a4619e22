"""What sits behind the endpoints: the settings a server runs with (`ServeSettings`),
the error a client is answered with (`ClientError`), and `Serving`, the state of one
server (loading its model instances, readiness, draining, the batcher) and its infer.

Every request is checked before it joins a batch (names, datatypes, shapes, rows
within the batch limit), so a bad request fails alone. Readiness turns true only once
every instance is loaded and has run a warm-up batch at the served batch size, and
turns false at once when the server starts draining.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool

from bakeoff.serve import protocol
from bakeoff.serve.batcher import Batcher, BatchFailed, Observer, QueueFull
from bakeoff.serve.metrics import Metrics
from bakeoff.serve.model import Runner, Servable, ServedSpec, make_tokenizer

# A JSON body this large is parsed off the event loop, so one big request does not
# hold up the small ones behind it.
_PARSE_INLINE_BYTES = 256 * 1024


@dataclass(frozen=True)
class ServeSettings:
    """How a server runs: its batching, instances, queue and body limits, token, drain."""

    max_batch_size: int = 1
    max_queue_delay_ms: float = 0.0
    instances: int = 1
    max_queue: int = 256
    token: str | None = None
    max_body_mb: float = 64.0
    drain_s: float = 30.0
    version: str = "1"

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)


class ClientError(Exception):
    """A request refused: answered with `status`, {"error": message} and `headers`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class Serving:
    """The state behind the endpoints: loading, ready, draining, the batcher."""

    def __init__(self, model: Servable, settings: ServeSettings) -> None:
        self.model = model
        self.spec: ServedSpec = model.spec
        self.settings = settings
        self.metrics = Metrics(settings.max_batch_size, lambda: self.in_flight)
        self.batcher: Batcher | None = None
        self.ready = False
        self.draining = False
        self.failed: str | None = None  # why loading failed; the server then exits 1
        self.in_flight = 0  # infer requests in the server (read, queued, run, answered)
        self.tokenize: Callable[[list[str]], dict[str, np.ndarray]] | None = None
        self.on_ready: Callable[[], None] = lambda: None

    # -- loading ---------------------------------------------------------------

    def start_loading(self) -> None:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._load, args=(loop,), name="bakeoff-load", daemon=True).start()

    def _load(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            runners = self._load_instances()
        except Exception as exc:  # reported, and the server stops with it
            message = f"{type(exc).__name__}: {exc}"
            loop.call_soon_threadsafe(self._loading_failed, message)
            return
        loop.call_soon_threadsafe(self._become_ready, runners)

    def _load_instances(self) -> list[Runner]:
        n = self.settings.instances
        threads = max(1, self.spec.threads // n)
        if self.spec.text is not None:
            self.tokenize = make_tokenizer(self.spec.text)
        runners = [self.model.load(threads) for _ in range(n)]
        warm = self._warmup_inputs(self.settings.max_batch_size)
        for run in runners:  # a warm-up at the served batch size, before ready
            outputs = run(warm)
            missing = [o.name for o in self.spec.outputs if o.name not in outputs]
            if missing:
                raise RuntimeError(f"the model gave no output {', '.join(missing)}")
        return runners

    def _warmup_inputs(self, rows: int) -> dict[str, np.ndarray]:
        arrays = {}
        for t in self.spec.inputs:
            shape = [
                rows if a == t.batch_axis else (1 if d < 0 else d) for a, d in enumerate(t.shape)
            ]
            arrays[t.name] = np.zeros(shape, dtype=protocol.DATATYPES[t.datatype])
        return arrays

    def _become_ready(self, runners: list[Runner]) -> None:
        m = self.metrics
        self.batcher = Batcher(
            runners,
            {t.name: t.batch_axis for t in self.spec.inputs},
            max_rows=self.settings.max_batch_size,
            max_delay_s=self.settings.max_queue_delay_ms / 1000.0,
            max_queue=self.settings.max_queue,
            observer=Observer(batch=m.batch, queued=m.queue_seconds.observe),
            in_server=lambda: self.in_flight,
        )
        self.batcher.start()
        # Announced before readiness flips, so that whoever polls the ready endpoint
        # finds the "ready:" line already written.
        self.on_ready()
        self.ready = not self.draining

    def _loading_failed(self, message: str) -> None:
        self.failed = message
        self.on_ready()

    def begin_drain(self) -> None:
        self.draining = True
        self.ready = False

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()

    # -- requests ----------------------------------------------------------------

    def check_model(self, name: str, version: str | None) -> None:
        if name != self.spec.name:
            raise ClientError(404, f"unknown model {name!r}; this server serves {self.spec.name!r}")
        if version not in (None, "", self.settings.version):
            raise ClientError(
                404, f"model {name!r} has no version {version!r}; it has {self.settings.version!r}"
            )

    def not_ready(self) -> ClientError | None:
        if self.draining:
            return ClientError(503, "the server is shutting down", {"Retry-After": "1"})
        if not self.ready:
            why = self.failed or "the model is still loading and warming up"
            return ClientError(503, why, {"Retry-After": "1"})
        return None

    def is_text(self, request: protocol.InferRequest) -> bool:
        """The request sends text alone, for the server to tokenize."""
        text = self.spec.text
        return text is not None and set(request.inputs) == {text.name}

    def inputs_of(
        self, request: protocol.InferRequest
    ) -> tuple[dict[str, np.ndarray], int, Hashable]:
        """The request's arrays as the model takes them, its rows, and its batch key;
        ClientError (400) for anything the model does not take."""
        spec = self.spec
        given = request.inputs
        text = spec.text
        if self.is_text(request):
            assert text is not None
            return self._tokenized(given[text.name], request.datatypes[text.name])
        expected = {t.name: t for t in spec.inputs}
        wanted = ", ".join(f"{t.name} ({t.datatype} {list(t.shape)})" for t in spec.inputs)
        if text is not None:
            wanted += f"; or {text.name} (BYTES [-1]) alone"
        unknown = [n for n in given if n not in expected]
        if unknown:
            raise ClientError(400, f"unknown input {', '.join(unknown)}; the model takes {wanted}")
        missing = [n for n in expected if n not in given]
        if missing:
            raise ClientError(400, f"missing input {', '.join(missing)}; the model takes {wanted}")
        rows: int | None = None
        key: list[Any] = []
        arrays = {}
        for name, t in expected.items():
            array = given[name]
            datatype = request.datatypes[name]
            if datatype != t.datatype:
                raise ClientError(400, f"input {name}: datatype {datatype}, expected {t.datatype}")
            shape = array.shape
            if len(shape) != len(t.shape) or any(
                d != e for d, e in zip(shape, t.shape, strict=True) if e >= 0
            ):
                raise ClientError(
                    400,
                    f"input {name}: shape {list(shape)}, expected {list(t.shape)} (-1: any size)",
                )
            if t.batch_axis is None:
                key.append((name, array.tobytes()))
            else:
                n = shape[t.batch_axis]
                if rows is not None and n != rows:
                    raise ClientError(400, f"input {name}: {n} rows, but another input has {rows}")
                rows = n
                key.append(tuple(d for a, d in enumerate(shape) if a != t.batch_axis))
            arrays[name] = array
        return arrays, self._rows(rows), tuple(key)

    def _rows(self, rows: int | None) -> int:
        limit = self.settings.max_batch_size
        if rows is None:
            return 1  # every input is a constant: one row
        if rows < 1:
            raise ClientError(400, "the request has no rows (a batch axis of size 0)")
        if rows > limit:
            raise ClientError(
                400,
                f"the request has {rows} rows; this server's batch limit is {limit} rows "
                "(--max-batch-size): send at most that many per request",
            )
        return rows

    def _tokenized(
        self, texts: np.ndarray, datatype: str
    ) -> tuple[dict[str, np.ndarray], int, Hashable]:
        assert self.spec.text is not None and self.tokenize is not None
        name = self.spec.text.name
        if datatype != "BYTES":
            raise ClientError(400, f"input {name}: datatype {datatype}, expected BYTES (texts)")
        if texts.ndim not in (1, 2) or (texts.ndim == 2 and texts.shape[1] != 1):
            raise ClientError(
                400, f"input {name}: shape {list(texts.shape)}, expected [-1] or [-1, 1]"
            )
        try:
            strings = [bytes(b).decode("utf-8") for b in texts.reshape(-1)]
        except (UnicodeDecodeError, TypeError):
            raise ClientError(400, f"input {name}: every element must be UTF-8 text") from None
        rows = self._rows(len(strings))
        return self.tokenize(strings), rows, ()

    async def infer(self, body: bytes, header_length: int | None) -> tuple[bytes, int | None]:
        if len(body) > _PARSE_INLINE_BYTES:
            request = await run_in_threadpool(protocol.parse_infer_request, body, header_length)
        else:
            request = protocol.parse_infer_request(body, header_length)
        if self.is_text(request):  # tokenizing is CPU work: off the event loop
            arrays, rows, key = await run_in_threadpool(self.inputs_of, request)
        else:
            arrays, rows, key = self.inputs_of(request)
        binary = protocol.binary_choice(request, [o.name for o in self.spec.outputs])
        assert self.batcher is not None
        try:
            done = await self.batcher.run_now(arrays, rows, key)
            if done is None:
                done = await self.batcher.infer(arrays, rows, key)
        except QueueFull as exc:
            raise ClientError(503, str(exc), {"Retry-After": "1"}) from None
        except BatchFailed as exc:
            raise ClientError(500, str(exc)) from None
        outputs = [(name, done[name]) for name in binary]
        return protocol.encode_infer_response(
            self.spec.name, self.settings.version, request.id, outputs, binary
        )
