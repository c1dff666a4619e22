"""The server's Prometheus metrics, in a registry of its own (one per app, so that
two servers in one process, as in the tests, never share counts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds: from well under a millisecond (a tiny model) to a slow batch.
_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class Metrics:
    """`in_flight` reads the server's own count when scraped, and the request counter's
    children are kept by (endpoint, status): a request's latency pays for as few
    metric updates as the names above need."""

    def __init__(self, max_batch_rows: int, in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "bakeoff_requests",
            "HTTP requests by endpoint and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "bakeoff_request_duration_seconds",
            "infer requests, arrival to response",
            buckets=_SECONDS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "bakeoff_queue_duration_seconds",
            "time a request waited for its batch",
            buckets=_SECONDS,
            registry=r,
        )
        self.compute_seconds = Histogram(
            "bakeoff_compute_duration_seconds",
            "time the runtime took for a batch",
            buckets=_SECONDS,
            registry=r,
        )
        rows = sorted({1, max_batch_rows} | {2**k for k in range(max_batch_rows.bit_length())})
        self.batch_size = Histogram(
            "bakeoff_batch_size",
            "rows per executed batch",
            buckets=[float(b) for b in rows if b <= max_batch_rows],
            registry=r,
        )
        self.rows = Counter("bakeoff_inference_rows", "rows inferred", registry=r)
        self.executions = Counter("bakeoff_executions", "batches executed", registry=r)
        self.in_flight = Gauge("bakeoff_in_flight_requests", "requests being served", registry=r)
        self.in_flight.set_function(in_flight)
        self._request_counters: dict[tuple[str, int], Any] = {}

    def count_request(self, endpoint: str, status: int) -> None:
        counter = self._request_counters.get((endpoint, status))
        if counter is None:  # endpoints and statuses are few: this dict stays small
            counter = self.requests.labels(endpoint, str(status))
            self._request_counters[endpoint, status] = counter
        counter.inc()

    def batch(self, rows: int, seconds: float) -> None:
        self.batch_size.observe(rows)
        self.rows.inc(rows)
        self.executions.inc()
        self.compute_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
