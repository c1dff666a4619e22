"""The HTTP server: the Open Inference Protocol (v2) REST API on FastAPI, except for
infer itself, which is answered in plain ASGI ahead of FastAPI's routing (the one
hot path) and added to the OpenAPI document by hand.

Every request is checked before it joins a batch (names, datatypes, shapes, rows
within the batch limit), so a bad request fails alone. Bodies are counted while
they are read and refused past the limit. Readiness turns true only once every
instance is loaded and has run a warm-up batch at the served batch size, and turns
false at once when the server starts draining.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

import bakeoff
from bakeoff.serve import protocol
from bakeoff.serve.batcher import Batcher, BatchFailed, Observer, QueueFull
from bakeoff.serve.metrics import Metrics
from bakeoff.serve.model import Runner, Servable, ServedSpec, make_tokenizer

LIVE_PATH = "/v2/health/live"
# A JSON body this large is parsed off the event loop, so one big request does not
# hold up the small ones behind it.
_PARSE_INLINE_BYTES = 256 * 1024


@dataclass(frozen=True)
class ServeSettings:
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


# -- the OpenAPI schema (documentation and schemathesis; responses are built by hand) --


class ErrorBody(BaseModel):
    error: str


class HealthBody(BaseModel):
    live: bool | None = None
    ready: bool | None = None
    reason: str | None = None


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any] = {}


class OutputTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[OutputTensor]


_DATATYPE_NAMES = sorted(protocol.DATATYPES)
_INFER_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object"},
        "inputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "shape", "datatype"],
                "properties": {
                    "name": {"type": "string"},
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    "datatype": {"type": "string", "enum": _DATATYPE_NAMES},
                    "parameters": {"type": "object"},
                    "data": {},
                },
            },
        },
        "outputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
            },
        },
    },
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody} for code in codes}


def _error(exc: ClientError) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, exc.status, headers=exc.headers)


async def _read_body(headers: dict[bytes, bytes], receive: Receive, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes `limit` bytes: never read whole first."""
    declared = headers.get(b"content-length")
    too_big = ClientError(413, f"the request body is over the {limit}-byte limit (--max-body-mb)")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_big
        except ValueError:
            raise ClientError(400, f"Content-Length {declared!r} is not a number") from None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientError(400, "the client went away before its body was read")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def answer_infer(
    serving: Serving,
    scope: Scope,
    receive: Receive,
    send: Send,
    name: str,
    version: str | None,
) -> None:
    """POST .../infer, as plain ASGI: the one hot path, kept free of the framework's
    routing and request objects (their cost shows in the latency at one request at a
    time, since this code runs cache-cold after each inference)."""
    serving.in_flight += 1
    start = time.perf_counter()
    headers = dict(scope["headers"])
    extra: list[tuple[bytes, bytes]] = []
    try:
        serving.check_model(name, version)
        problem = serving.not_ready()
        if problem is not None:
            raise problem
        body = await _read_body(headers, receive, serving.settings.max_body_bytes)
        header = headers.get(b"inference-header-content-length")
        try:
            header_length = None if header is None else int(header)
        except ValueError:
            raise ClientError(
                400, f"Inference-Header-Content-Length {header!r} is not a number"
            ) from None
        try:
            content, json_length = await serving.infer(body, header_length)
        except protocol.ProtocolError as exc:
            raise ClientError(400, str(exc)) from None
        status = 200
        if json_length is None:
            media = b"application/json"
        else:
            media = b"application/octet-stream"
            extra.append((b"inference-header-content-length", str(json_length).encode()))
    except ClientError as exc:
        status, media = exc.status, b"application/json"
        content = json.dumps({"error": str(exc)}).encode()
        extra = [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
    except Exception as exc:  # a fault of ours: this request gets a 500, the server stays up
        status, media = 500, b"application/json"
        content = json.dumps({"error": f"internal error: {type(exc).__name__}: {exc}"}).encode()
    finally:
        serving.in_flight -= 1
    response_headers = [
        (b"content-type", media),
        (b"content-length", str(len(content)).encode()),
        *extra,
    ]
    try:
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": content})
    finally:  # after the answer has gone: it need not wait for the metrics
        serving.metrics.request_seconds.observe(time.perf_counter() - start)


def _infer_operations() -> tuple[dict[str, Any], dict[str, Any]]:
    """The OpenAPI path items of the two infer endpoints (answered by `answer_infer`,
    not by a FastAPI route) and the component schemas they refer to."""
    components: dict[str, Any] = {}
    for model in (InferResponse, ErrorBody):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema

    def ref(name: str) -> dict[str, Any]:
        return {"schema": {"$ref": f"#/components/schemas/{name}"}}

    def operation(operation_id: str, params: list[str]) -> dict[str, Any]:
        errors = {
            str(code): {
                "description": "an error",
                "content": {"application/json": ref("ErrorBody")},
            }
            for code in (400, 401, 404, 413, 500, 503)
        }
        return {
            "post": {
                "summary": "Infer",
                "operationId": operation_id,
                "parameters": [
                    {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                    for p in params
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _INFER_REQUEST_SCHEMA}},
                },
                "responses": {
                    "200": {
                        "description": "JSON, or JSON followed by binary tensors "
                        "(Inference-Header-Content-Length)",
                        "content": {
                            "application/json": ref("InferResponse"),
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            },
                        },
                    },
                    **errors,
                },
            }
        }

    paths = {
        "/v2/models/{name}/infer": operation("model_infer", ["name"]),
        "/v2/models/{name}/versions/{version}/infer": operation(
            "model_version_infer", ["name", "version"]
        ),
    }
    return paths, components


def create_app(serving: Serving) -> Guard:
    spec, settings = serving.spec, serving.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield  # loading starts once the server listens (`server.serve`)
        await serving.close()

    app = FastAPI(
        lifespan=lifespan,
        title="bakeoff serve",
        version=bakeoff.__version__,
        description=f"{spec.name}: {spec.description} (Open Inference Protocol v2)",
        docs_url=None,
        redoc_url=None,
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=exc.headers)

    @app.get("/v2", responses={200: {"model": ServerMetadata}, **_errors(401)})
    async def server_metadata() -> Response:
        return JSONResponse(
            {
                "name": "bakeoff",
                "version": bakeoff.__version__,
                "extensions": ["binary_tensor_data"],
            }
        )

    @app.get(LIVE_PATH, responses={200: {"model": HealthBody}})
    async def live() -> Response:
        return JSONResponse({"live": True})

    @app.get("/v2/health/ready", responses={200: {"model": HealthBody}, **_errors(401, 503)})
    async def ready() -> Response:
        problem = serving.not_ready()
        if problem is not None:
            return JSONResponse({"ready": False, "reason": str(problem)}, 503, problem.headers)
        return JSONResponse({"ready": True})

    def metadata(name: str, version: str | None) -> Response:
        try:
            serving.check_model(name, version)
        except ClientError as exc:
            return _error(exc)
        parameters: dict[str, Any] = {"max_batch_size": settings.max_batch_size}
        if spec.text is not None:
            parameters["text_input"] = {
                "name": spec.text.name,
                "datatype": "BYTES",
                "shape": [-1],
                "max_length": spec.text.max_length,
                "instead_of": list(spec.text.produces),
            }
        return JSONResponse(
            {
                "name": spec.name,
                "versions": [settings.version],
                "platform": spec.platform,
                "inputs": [t.metadata() for t in spec.inputs],
                "outputs": [t.metadata() for t in spec.outputs],
                "parameters": parameters,
            }
        )

    def model_ready(name: str, version: str | None) -> Response:
        try:
            serving.check_model(name, version)
        except ClientError as exc:
            return _error(exc)
        problem = serving.not_ready()
        if problem is not None:
            return JSONResponse({"ready": False, "reason": str(problem)}, 503, problem.headers)
        return JSONResponse({"ready": True})

    model_responses = {200: {"model": ModelMetadata}, **_errors(401, 404)}
    ready_responses = {200: {"model": HealthBody}, **_errors(401, 404, 503)}

    @app.get("/v2/models/{name}", responses=model_responses)
    async def model_metadata(name: str) -> Response:
        return metadata(name, None)

    @app.get("/v2/models/{name}/versions/{version}", responses=model_responses)
    async def model_version_metadata(name: str, version: str) -> Response:
        return metadata(name, version)

    @app.get("/v2/models/{name}/ready", responses=ready_responses)
    async def model_is_ready(name: str) -> Response:
        return model_ready(name, None)

    @app.get("/v2/models/{name}/versions/{version}/ready", responses=ready_responses)
    async def model_version_is_ready(name: str, version: str) -> Response:
        return model_ready(name, version)

    @app.get("/metrics", responses={200: {"content": {"text/plain": {}}}, **_errors(401)})
    async def metrics() -> Response:
        return Response(serving.metrics.render(), media_type="text/plain; version=0.0.4")

    paths, components = _infer_operations()

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            schema["paths"].update(paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    # Outside FastAPI's own middleware, so that infer passes through no layer but this.
    return Guard(app, serving)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


_INFER_PATH = re.compile(r"^/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer$")


def _endpoint(path: str) -> str:
    """A label per endpoint, never per path: a client cannot grow the metrics."""
    if path == LIVE_PATH:
        return "live"
    if path == "/v2/health/ready":
        return "ready"
    if path == "/v2":
        return "server_metadata"
    if path == "/metrics":
        return "metrics"
    if path.startswith("/v2/models/"):
        for suffix, label in (("/infer", "infer"), ("/ready", "model_ready")):
            if path.endswith(suffix):
                return label
        return "model_metadata"
    return "other"


class Guard:
    """Bearer-token check on every endpoint but liveness (compared in constant time),
    the request count by endpoint and status, and POST .../infer answered here by
    `answer_infer`, ahead of FastAPI. Plain ASGI: it adds no task per request, which
    the latency overhead would show."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], serving: Serving):
        self.app = app
        self.serving = serving
        token = serving.settings.token
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = _endpoint(scope["path"])
        count = self.serving.metrics.count_request
        if self.expected is not None and scope["path"] != LIVE_PATH:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                count(endpoint, 401)
                response = JSONResponse(
                    {"error": "missing or wrong token: send Authorization: Bearer <token>"},
                    401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        status = {"code": 500}

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            infer = _INFER_PATH.match(scope["path"])
            if infer is None:
                await self.app(scope, receive, counted)
            elif scope["method"] != "POST":
                response = JSONResponse(
                    {"error": "infer takes POST"}, 405, headers={"Allow": "POST"}
                )
                await response(scope, receive, counted)
            else:
                await answer_infer(
                    self.serving, scope, receive, counted, infer["name"], infer["version"]
                )
        finally:
            count(endpoint, status["code"])
