"""Requests that arrive over time, sent to an OpenAI-compatible completions endpoint
(vLLM's server, llama.cpp's, `transformers serve`), and timed as the server
scenario times an engine in-process (`generators.arrivals.Served`).

This is bakeoff's own client for an engine's *own* server (`bakeoff serve` of a
generative run starts one): each request goes out at its arrival time, never
waiting for a free connection (the pool has no limit), streams its
answer as server-sent events, and is stamped on the client's clock at the first
and last chunk that carries text. Its token count is the server's own
(`usage.completion_tokens`, asked for with `stream_options.include_usage`), else
the number of text chunks. Times are in ns from the schedule's start, TTFT from
the request's arrival (its send), so a request the server queues pays for it.

Since a client sees no engine's batch, `Served.running` is what it can see: the
mean number of requests in flight beside it (itself included) over its life.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.errors import UserError
from bakeoff.generators.arrivals import Served, mean_in_flight


@dataclass(frozen=True)
class Stamps:
    sent_ns: int
    first_ns: int | None  # the first chunk that carried text
    last_ns: int | None
    chunks: int  # chunks that carried text
    usage_tokens: int | None  # the server's completion_tokens
    error: str | None = None


def _text_of(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    return "".join(str(c.get("text") or "") for c in choices if isinstance(c, dict))


async def _one(
    session: Any, url: str, body: dict[str, Any], start: int, at_ns: int, headers: dict[str, str]
) -> Stamps:
    clock = time.perf_counter_ns
    left = start + at_ns - clock()
    if left > 0:
        await asyncio.sleep(left / 1e9)
    sent = clock() - start
    first = last = usage = None
    chunks = 0
    pending = b""
    try:
        async with session.post(url, json=body, headers=headers) as response:
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")[:200]
                return Stamps(sent, None, None, 0, None, f"HTTP {response.status}: {text}")
            # raw bytes as they arrive, stamped then (not when a reader has buffered
            # a line), split into server-sent events here
            async for data in response.content.iter_any():
                now = clock() - start
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        break
                    event = json.loads(payload)
                    if "error" in event:
                        error = str(event["error"])[:200]
                        return Stamps(sent, first, last, chunks, usage, error)
                    if _text_of(event):
                        chunks += 1
                        first = now if first is None else first
                        last = now
                    if isinstance(event.get("usage"), dict):
                        usage = event["usage"].get("completion_tokens")
    except Exception as e:  # a refused or broken connection is this request's failure
        return Stamps(sent, first, last, chunks, usage, f"{type(e).__name__}: {e}"[:200])
    return Stamps(sent, first, last, chunks, usage)


def in_flight_beside(stamps: Sequence[Stamps]) -> list[float]:
    """Per request, the mean number of requests in flight over its life (itself
    included), from the client's send and last-chunk times."""
    return mean_in_flight(
        [(s.sent_ns, s.last_ns if s.last_ns is not None else s.sent_ns) for s in stamps]
    )


async def _send_all(
    url: str,
    bodies: Sequence[dict[str, Any]],
    at_ns: Sequence[int],
    headers: dict[str, str],
    timeout_s: float,
    keep_alive: bool,
) -> list[Stamps]:
    import aiohttp

    # no limit on connections: no request waits for another's to be free
    connector = aiohttp.TCPConnector(limit=0, force_close=not keep_alive)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter_ns()
        tasks = [
            _one(session, url, b, start, t, headers) for b, t in zip(bodies, at_ns, strict=True)
        ]
        return list(await asyncio.gather(*tasks))


def send(
    base_url: str,
    model: str,
    schedule: Sequence[tuple[int, str | list[int]]],
    max_tokens: int,
    *,
    api_key: str | None = None,
    extra: dict[str, Any] | None = None,
    timeout_s: float = 600.0,
    keep_alive: bool = True,
) -> tuple[list[Served], list[Stamps]]:
    """Send `schedule` ((arrival ns, prompt text or token ids), in arrival order) to
    `base_url`/v1/completions, greedy, streamed; `extra` joins each request's body
    (e.g. `ignore_eos` on vLLM). `keep_alive=False`: a connection of its own per
    request, for a server that closes kept connections under the client (llama.cpp's:
    a request sent on one fails). Returns what each
    answered request saw, and every request's stamps (a failed one has `error`)."""
    if importlib.util.find_spec("aiohttp") is None:
        raise UserError("bakeoff's OpenAI client needs aiohttp: pip install 'bakeoff[serve]'")
    url = base_url.rstrip("/") + "/v1/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    bodies = [
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **(extra or {}),
        }
        for _, prompt in schedule
    ]
    at_ns = [t for t, _ in schedule]
    stamps = asyncio.run(_send_all(url, bodies, at_ns, headers, timeout_s, keep_alive))
    running = in_flight_beside(stamps)
    served = [
        Served(
            s.sent_ns,
            s.first_ns,
            s.last_ns,
            s.usage_tokens if s.usage_tokens is not None else s.chunks,
            r,
        )
        for s, r in zip(stamps, running, strict=True)
        if s.error is None and s.first_ns is not None and s.last_ns is not None
    ]
    return served, stamps
