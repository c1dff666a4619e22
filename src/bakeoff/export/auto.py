"""`auto` batching and instances, from what the run measured of a variant: what
`bakeoff serve` runs with, and what `bakeoff export --format triton` writes into
config.pbtxt (pure: no server, no runtime).

- Batch size: the one with the best throughput whose p99 meets --latency-bound-ms
  (when given). Batching stays off when it does not pay: when no larger batch gave
  more than batch 1's throughput on this machine, beyond the bake-off's own
  equivalence margin (`PAYS`), as is common on CPUs. No higher bar: the batcher does not
  wait out its delay for company that is not in the server (see
  `bakeoff.serve.batcher`), so batching costs little where it gains anything, and a server held to
  batch 1 where a batch gave g times its throughput reaches at most 1/g of the
  variant's best (0.91x at g = 1.10).
- Queue delay: `DELAY_FRACTION` of that batch's measured p50, so a batch waits at
  most half a batch's time to fill; within the latency bound, if one is given.
- Instances: the stream count of the offline sweep's peak, where one was run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bakeoff.judge.thresholds import DEFAULT_MARGIN

PAYS = 1.0 + DEFAULT_MARGIN
DELAY_FRACTION = 0.5


@dataclass(frozen=True)
class Batching:
    max_batch_size: int
    max_queue_delay_ms: float
    instances: int
    why: list[str] = field(default_factory=list)


def _rows(measured: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The best measured row per batch size (an A/A twin measures one twice)."""
    best: dict[int, dict[str, Any]] = {}
    for r in measured:
        if not r.get("samples_per_s"):
            continue
        bs = int(r["batch_size"])
        if bs not in best or r["samples_per_s"] > best[bs]["samples_per_s"]:
            best[bs] = r
    return best


def best_batch(
    measured: list[dict[str, Any]], latency_bound_ms: float | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The measured row to serve at, and why (None when nothing was measured)."""
    rows = _rows(measured)
    if not rows:
        return None, []
    eligible = {
        bs: r
        for bs, r in rows.items()
        if latency_bound_ms is None or (r.get("p99_ms") or float("inf")) <= latency_bound_ms
    }
    why = []
    if not eligible:
        fastest = min(rows.values(), key=lambda r: r.get("p99_ms") or float("inf"))
        why.append(
            f"no measured batch size meets p99 <= {latency_bound_ms:g} ms: batch "
            f"{fastest['batch_size']}, the lowest p99 ({fastest['p99_ms']:.2f} ms)"
        )
        return fastest, why
    best = max(eligible.values(), key=lambda r: r["samples_per_s"])
    measured_words = ", ".join(
        f"batch {bs}: {r['samples_per_s']:.1f}/s, p99 {r.get('p99_ms') or 0:.2f} ms"
        for bs, r in sorted(rows.items())
    )
    why.append(f"measured in the run: {measured_words}")
    one = eligible.get(1)
    if best["batch_size"] > 1 and one is not None:
        gain = best["samples_per_s"] / one["samples_per_s"]
        if gain < PAYS:
            why.append(
                f"batching off: batch {best['batch_size']} gave {gain:.2f}x batch 1's "
                f"throughput, within the {DEFAULT_MARGIN:.0%} the bake-off counts as a tie"
            )
            return one, why
        why.append(f"batch {best['batch_size']} gave {gain:.2f}x batch 1's throughput")
    bound = f" with p99 <= {latency_bound_ms:g} ms" if latency_bound_ms is not None else ""
    why.append(f"batch {best['batch_size']}: the best throughput{bound}")
    return best, why


def choose(
    measured: list[dict[str, Any]],
    served_batch_size: int,
    max_batch_size: int | None,
    max_queue_delay_ms: float | None,
    instances: int | None,
    latency_bound_ms: float | None = None,
) -> Batching:
    """The server's settings: each given one as given, each None (`auto`) from the
    measurements, with the reason for every choice."""
    rows = _rows(measured)
    why: list[str] = []
    if max_batch_size is None:
        best, why = best_batch(measured, latency_bound_ms)
        if best is None:
            max_batch_size = served_batch_size
            why.append(
                f"no measurements in the export: batches of up to its own batch size, "
                f"{served_batch_size}"
            )
        else:
            max_batch_size = int(best["batch_size"])
    row = rows.get(max_batch_size)
    if max_queue_delay_ms is None:
        if max_batch_size == 1:
            max_queue_delay_ms = 0.0
            why.append("queue delay 0 ms: every request runs as it comes")
        elif row is None or not row.get("p50_ms"):
            max_queue_delay_ms = 0.0
            why.append(
                f"queue delay 0 ms: batch {max_batch_size} was not measured, so there is "
                "no latency to take a fraction of (requests already waiting still batch)"
            )
        else:
            max_queue_delay_ms = DELAY_FRACTION * float(row["p50_ms"])
            words = f"{DELAY_FRACTION:g} x batch {max_batch_size}'s p50 ({row['p50_ms']:.2f} ms)"
            if latency_bound_ms is not None and row.get("p99_ms"):
                room = max(0.0, latency_bound_ms - float(row["p99_ms"]))
                if room < max_queue_delay_ms:
                    max_queue_delay_ms = room
                    words = f"what the {latency_bound_ms:g} ms bound leaves over its p99"
            why.append(f"queue delay {max_queue_delay_ms:.2f} ms: {words}")
    if instances is None:
        streams = row.get("offline_streams") if row else None
        if streams:
            instances = int(streams)
            why.append(
                f"{instances} instance(s): the offline sweep's peak at batch {max_batch_size} "
                f"({row['offline_samples_per_s']:.1f} samples/s)"  # type: ignore[index]
            )
        else:
            instances = 1
            why.append(
                "1 instance: the run swept no streams at this batch size "
                "(`bakeoff run --scenario offline` measures them)"
            )
    return Batching(max_batch_size, float(max_queue_delay_ms), instances, why)
