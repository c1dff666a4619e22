"""Running the app under uvicorn: loopback by default, a token off loopback, and a
drain on SIGTERM or Ctrl-C (readiness 503 at once, new requests refused, the ones
in flight finished within --drain-s, then exit 0)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from types import FrameType

import uvicorn

from bakeoff.errors import UserError
from bakeoff.serve.app import create_app
from bakeoff.serve.exposure import check_exposure
from bakeoff.serve.model import Servable
from bakeoff.serve.serving import ServeSettings, Serving

# Idle keep-alive connections are closed after this many seconds (nginx's default).
KEEP_ALIVE_S = 75


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, serving: Serving, announce: Callable[[str], None]
    ) -> None:
        super().__init__(config)
        self.serving = serving
        self.announce = announce
        self.drain_started: float | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:  # it could not bind; uvicorn said why
            return
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                self.announce(
                    f"listening on http://{host}:{port}/v2 (ready once the model is "
                    "loaded and warmed up)"
                )
        # Loading starts now, in a thread: liveness answers meanwhile, readiness 503.
        self.serving.start_loading()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it stops listening at once and re-raises the signal after,
        # which would exit by the signal rather than 0.
        if self.drain_started is not None:  # a second signal: stop now
            self.should_exit = self.force_exit = True
            return
        self.drain_started = time.monotonic()
        self.serving.begin_drain()
        self.announce(
            f"draining: readiness is 503, {self.serving.in_flight} request(s) in flight "
            f"(at most {self.serving.settings.drain_s:g} s; a second signal stops at once)"
        )

    async def on_tick(self, counter: int) -> bool:
        if self.serving.failed is not None or (
            self.drain_started is not None
            and (
                self.serving.in_flight == 0
                or time.monotonic() - self.drain_started > self.serving.settings.drain_s
            )
        ):
            self.should_exit = True
        return await super().on_tick(counter)


def serve(
    model: Servable,
    settings: ServeSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Callable[[str], None] = lambda line: print(line, flush=True),
) -> int:
    """Serve until SIGTERM / Ctrl-C; the exit code (0, or 1 when the model would not load)."""
    check_exposure(host, settings.token)
    serving = Serving(model, settings)
    spec = serving.spec

    def ready() -> None:
        if serving.failed is not None:
            announce(f"error: the model did not load: {serving.failed}")
        else:
            announce(
                f"ready: {spec.name} version {settings.version} "
                f"({settings.instances} instance(s), batches of up to "
                f"{settings.max_batch_size} row(s), {settings.max_queue_delay_ms:g} ms delay)"
            )

    serving.on_ready = ready
    config = uvicorn.Config(
        create_app(serving),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # a line per request costs more than the request's own overhead
        server_header=False,
        # No X-Forwarded-For rewriting: nothing here reads the client's address, and
        # it is one more layer on every request's path.
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        # Longer than clients keep an idle connection (httpx and requests: 5 s, the
        # same as uvicorn's own default): with equal timeouts the server may close a
        # connection just as a client sends on it, and that request fails unanswered.
        timeout_keep_alive=KEEP_ALIVE_S,
        lifespan="on",
    )
    server = _Server(config, serving, announce)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn's startup failure, after logging its reason
        raise UserError(
            f"could not listen on {host}:{port} (exit {exc.code}; uvicorn's reason is above: "
            "a port in use, or an address not on this machine)"
        ) from None
    if serving.failed is not None:
        return 1
    if serving.in_flight:
        print(f"drain: {serving.in_flight} request(s) cut off after --drain-s", file=sys.stderr)
    return 0
