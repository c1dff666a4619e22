"""The HTTP server: the Open Inference Protocol (v2) REST API on FastAPI, except for
infer itself, which is answered in plain ASGI ahead of FastAPI's routing (the one
hot path) and added to the OpenAPI document by hand (`schemas.infer_operations`).

`create_app` registers the endpoints and wraps them in `Guard`: the token check,
the request count, and infer. Bodies are counted while they are read and refused
past the limit. What the endpoints answer from is `serving.Serving`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

import bakeoff
from bakeoff.serve import protocol
from bakeoff.serve.schemas import (
    HealthBody,
    ModelMetadata,
    ServerMetadata,
    error_responses,
    infer_operations,
)
from bakeoff.serve.serving import ClientError, Serving

LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_INFER_PATH = re.compile(r"^/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer$")


def create_app(serving: Serving) -> Guard:
    """The ASGI app of one server: FastAPI's endpoints, behind `Guard`."""
    spec = serving.spec

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

    # Registered in this order, which is the order of the OpenAPI document's paths.
    _add_server_routes(app, serving)
    _add_model_routes(app, serving)
    _add_metrics_route(app, serving)
    _document_infer(app)
    # Outside FastAPI's own middleware, so that infer passes through no layer but this.
    return Guard(app, serving)


def _add_server_routes(app: FastAPI, serving: Serving) -> None:
    """The server's metadata, liveness and readiness."""

    @app.get("/v2", responses={200: {"model": ServerMetadata}, **error_responses(401)})
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

    @app.get(READY_PATH, responses={200: {"model": HealthBody}, **error_responses(401, 503)})
    async def ready() -> Response:
        return _readiness(serving)


def _add_model_routes(app: FastAPI, serving: Serving) -> None:
    """The model's metadata and readiness, with and without a version in the path."""
    model_responses = {200: {"model": ModelMetadata}, **error_responses(401, 404)}
    ready_responses = {200: {"model": HealthBody}, **error_responses(401, 404, 503)}

    @app.get("/v2/models/{name}", responses=model_responses)
    async def model_metadata(name: str) -> Response:
        return _model_metadata(serving, name, None)

    @app.get("/v2/models/{name}/versions/{version}", responses=model_responses)
    async def model_version_metadata(name: str, version: str) -> Response:
        return _model_metadata(serving, name, version)

    @app.get("/v2/models/{name}/ready", responses=ready_responses)
    async def model_is_ready(name: str) -> Response:
        return _model_readiness(serving, name, None)

    @app.get("/v2/models/{name}/versions/{version}/ready", responses=ready_responses)
    async def model_version_is_ready(name: str, version: str) -> Response:
        return _model_readiness(serving, name, version)


def _add_metrics_route(app: FastAPI, serving: Serving) -> None:
    @app.get("/metrics", responses={200: {"content": {"text/plain": {}}}, **error_responses(401)})
    async def metrics() -> Response:
        return Response(serving.metrics.render(), media_type="text/plain; version=0.0.4")


def _document_infer(app: FastAPI) -> None:
    """Add the infer endpoints, which `Guard` answers ahead of FastAPI's routes, to the
    app's OpenAPI document."""
    paths, components = infer_operations()

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            schema["paths"].update(paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _readiness(serving: Serving) -> Response:
    problem = serving.not_ready()
    if problem is not None:
        return JSONResponse({"ready": False, "reason": str(problem)}, 503, problem.headers)
    return JSONResponse({"ready": True})


def _model_metadata(serving: Serving, name: str, version: str | None) -> Response:
    spec, settings = serving.spec, serving.settings
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


def _model_readiness(serving: Serving, name: str, version: str | None) -> Response:
    try:
        serving.check_model(name, version)
    except ClientError as exc:
        return _error(exc)
    return _readiness(serving)


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


def _endpoint(path: str) -> str:
    """A label per endpoint, never per path: a client cannot grow the metrics."""
    if path == LIVE_PATH:
        return "live"
    if path == READY_PATH:
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
