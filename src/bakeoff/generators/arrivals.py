"""Requests that arrive over time (the server scenario), served through each
engine's own scheduler, and what each request saw.

A schedule is Poisson arrivals at a rate (exponential gaps, seeded), each request
with a prompt drawn from the workload's, as MLPerf LoadGen's server scenario and
the LLM serving benchmarks (vLLM's `bench serve`, GuideLLM, AIPerf) send them. An
engine with a scheduler of its own (vLLM) takes each request as it arrives and
batches running ones its own way (`Generator.serve`); one without is fed by
`queue_in_batches`: whatever has arrived when the engine is free goes in as one
static batch (`generate_batch`), or one request at a time where the runtime has
no batching. Every time is in ns from the schedule's start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bakeoff.generators import Batch


@dataclass(frozen=True)
class Arrival:
    at_ns: int  # when the request arrives, after the schedule's start
    prompt: list[int]


@dataclass(frozen=True)
class Served:
    """One request: when it arrived, when its first and last tokens came, how many
    it got (its end-of-text not counted), and how many requests the engine was
    running beside it on average (itself included)."""

    arrived_ns: int
    first_ns: int
    last_ns: int
    tokens: int
    running: float

    @property
    def ttft_ns(self) -> int:
        return self.first_ns - self.arrived_ns

    @property
    def tpot_ns(self) -> int:
        """Time per output token after the first; a one-token answer's is its TTFT,
        the most it can be (as the TPOT rounds count it)."""
        if self.tokens > 1:
            return (self.last_ns - self.first_ns) // (self.tokens - 1)
        return self.ttft_ns


def poisson_schedule(
    rate_per_s: float, requests: int, prompts: Sequence[Sequence[int]], seed: int
) -> list[Arrival]:
    """`requests` arrivals at `rate_per_s` on average (exponential gaps), each with a
    prompt drawn at random from `prompts`; the first arrives at 0."""
    return [
        Arrival(at, list(prompts[i]))
        for at, i in poisson_times(rate_per_s, requests, len(prompts), seed)
    ]


def poisson_times(
    rate_per_s: float, requests: int, choices: int, seed: int
) -> list[tuple[int, int]]:
    """(arrival ns, which of `choices` prompts) for `requests` Poisson arrivals: the
    schedule itself, for prompts of any kind (token ids here, text for a server)."""
    if rate_per_s <= 0 or requests < 1 or choices < 1:
        raise ValueError(f"a schedule needs a rate above 0 and requests, not {rate_per_s}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, requests)
    gaps[0] = 0.0
    at = np.cumsum(gaps)
    picks = rng.integers(0, choices, requests)
    return [(int(t * 1e9), int(i)) for t, i in zip(at, picks, strict=True)]


def mean_in_flight(spans: Sequence[tuple[int, int]]) -> list[float]:
    """Per request (from, to), the mean number of requests in flight over its life,
    itself included: what can be said of an engine's batch from outside it (a
    client's view, or a scheduler that reports no batch)."""
    means = []
    for a0, a1 in spans:
        life = a1 - a0
        if life <= 0:
            means.append(1.0)
            continue
        overlap = sum(max(0, min(a1, b1) - max(a0, b0)) for b0, b1 in spans)
        means.append(overlap / life)
    return means


Clock = Callable[[], int]


def wait_until(clock: Clock, start: int, at_ns: int) -> None:
    """Sleep until `at_ns` after `start` (no busy wait: the engine's threads keep the
    cores)."""
    left = start + at_ns - clock()
    if left > 0:
        time.sleep(left / 1e9)


def queue_in_batches(
    schedule: Sequence[Arrival],
    generate_batch: Callable[[Sequence[Sequence[int]], int], Batch],
    max_new_tokens: int,
    max_batch: int,
    clock: Clock = time.perf_counter_ns,
) -> list[Served]:
    """An engine without a scheduler: each time it is free, every request that has
    arrived (up to `max_batch`) goes in as one batch, and the next waits for it to
    finish. A request's first token is the batch's first token for it; its last,
    when the batch ended (a static batch answers all at once)."""
    served: list[Served | None] = [None] * len(schedule)
    start = clock()
    nxt = 0
    while nxt < len(schedule):
        wait_until(clock, start, schedule[nxt].at_ns)
        now = clock() - start
        batch = [nxt]
        while (
            len(batch) < max_batch
            and batch[-1] + 1 < len(schedule)
            and schedule[batch[-1] + 1].at_ns <= now
        ):
            batch.append(batch[-1] + 1)
        nxt = batch[-1] + 1
        began = clock() - start
        answer = generate_batch([schedule[i].prompt for i in batch], max_new_tokens)
        ended = clock() - start
        for i, toks, first in zip(batch, answer.tokens, answer.first_token_ns, strict=True):
            served[i] = Served(schedule[i].at_ns, began + first, ended, len(toks), len(batch))
    return [s for s in served if s is not None]


def one_at_a_time(
    schedule: Sequence[Arrival],
    generate: Callable[[Sequence[int], int, Callable[[int], None]], list[int]],
    max_new_tokens: int,
    clock: Clock = time.perf_counter_ns,
) -> list[Served]:
    """An engine that answers one request after another: each waits in the queue,
    and its tokens are stamped as they come."""
    served = []
    start = clock()
    for arrival in schedule:
        wait_until(clock, start, arrival.at_ns)
        stamps: list[int] = []

        def stamp(_token: int, stamps: list[int] = stamps) -> None:
            stamps.append(clock() - start)

        generate(arrival.prompt, max_new_tokens, stamp)
        tokens = len(stamps)
        if not stamps:  # the model ended its text at once: its answer came then
            stamps = [clock() - start]
        served.append(Served(arrival.at_ns, stamps[0], stamps[-1], tokens, 1.0))
    return served
