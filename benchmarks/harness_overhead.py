"""Overhead of bakeoff's timing loop per timed call, against a bare loop.

Both loops call the same no-op function on the same cycled pool, side by side
in one process, alternating several times; the figure is the difference of the
medians per call. Target: <= 2 us per call.
"""

from __future__ import annotations

import statistics
import time

from bakeoff.inference.worker import timed_calls

CALLS = 200_000
REPEATS = 7


def noop(x: object) -> object:
    return x


def bare_loop(pool: list[object], n: int) -> int:
    k = len(pool)
    start = time.perf_counter_ns()
    for i in range(n):
        noop(pool[i % k])
    return time.perf_counter_ns() - start


def harness_loop(pool: list[object], n: int) -> int:
    start = time.perf_counter_ns()
    timed_calls(noop, pool, n, time.perf_counter_ns)
    return time.perf_counter_ns() - start


def main() -> None:
    pool: list[object] = [object() for _ in range(8)]
    bare, harness = [], []
    for _ in range(REPEATS):
        bare.append(bare_loop(pool, CALLS) / CALLS)
        harness.append(harness_loop(pool, CALLS) / CALLS)
    b, h = statistics.median(bare), statistics.median(harness)
    clock = [time.perf_counter_ns() for _ in range(2)]
    print(f"bare loop:    {b:8.1f} ns per call (median of {REPEATS} x {CALLS} calls)")
    print(f"timing loop:  {h:8.1f} ns per call")
    print(f"overhead:     {(h - b) / 1000:8.3f} us per timed call (target <= 2 us)")
    print(f"ratio timing/bare: {h / b:.2f}")
    print(f"(two back-to-back clock reads differ by {clock[1] - clock[0]} ns)")


if __name__ == "__main__":
    main()
