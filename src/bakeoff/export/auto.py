"""`auto` batching and instances, from what the run measured of a variant: what
`bakeoff serve` runs with, and what `bakeoff export --format triton` writes into
config.pbtxt (pure: no server, no runtime).

- The latency a served batch must keep to. With `--latency-bound-ms`, a batch size
  whose p99 meets it. Without one, the variant's own batch-1 latency bounds what
  serving may add to it: only a batch size whose p99 stays within `LATENCY_MULTIPLE`
  times batch 1's p99, and a queue delay of at most batch 1's p50. Where batch 1 was
  not measured for the variant, the smallest batch size measured stands in for it.
  Without this a variant measured at 9 ms (p50) at batch 1 and 281 ms (p99) at batch
  32 was served with batches of 32 and a 120 ms delay: about 40x the latency the run
  measured, for a lone request on a server that waits out its delay (Triton's does).
- Batch size: of those, the one with the best throughput. Batching stays off when it
  does not pay: when no larger batch gave more than batch 1's throughput on this
  machine, beyond the bake-off's own equivalence margin (`PAYS`), as is common on
  CPUs. No higher bar: the batcher does not wait out its delay for company that is
  not in the server (see `bakeoff.serve.batcher`), so batching costs little where it
  gains anything, and a server held to batch 1 where a batch gave g times its
  throughput reaches at most 1/g of the variant's best (0.91x at g = 1.10).
- Queue delay: `DELAY_FRACTION` of that batch's measured p50, so a batch waits at
  most half a batch's time to fill; within the latency bound: with
  `--latency-bound-ms`, what it leaves over the batch's p99; without, batch 1's p50.
- Instances: the stream count of the offline sweep's peak, where one was run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bakeoff.judge.thresholds import DEFAULT_MARGIN

PAYS = 1.0 + DEFAULT_MARGIN
DELAY_FRACTION = 0.5
# With no latency bound given, a batch may take at most this many times (K) batch 1's
# p99. A request arriving just as such a batch starts waits for it (K), for its own
# batch to fill (the queue delay, at most batch 1's p50) and for that batch (K):
# about 2K + 1 = 5x batch 1's latency at worst, against 2x for a request queued
# behind another with batching off (and the 40x reported before this bound); K = 4
# would allow 9x. K is what batching may cost a user who named no bound, so it is
# small; where a batch is nearly free (a GPU, a small model) a large one still fits.
# `--latency-bound-ms` trades more latency for throughput.
LATENCY_MULTIPLE = 2.0


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


def _p99(row: dict[str, Any]) -> float:
    """The row's p99 (inf when it has none: it meets no bound)."""
    return float(row.get("p99_ms") or math.inf)


@dataclass(frozen=True)
class Reference:
    """Without --latency-bound-ms: the measured batch whose latency bounds what
    serving may add (batch 1, else the smallest batch size measured)."""

    batch_size: int
    p50_ms: float
    p99_ms: float

    @property
    def p99_limit_ms(self) -> float:
        return LATENCY_MULTIPLE * self.p99_ms

    def words(self) -> str:
        which = f"batch {self.batch_size}"
        stand_in = (
            ""
            if self.batch_size == 1
            else f" (batch 1 was not measured for this variant: {which}, the smallest "
            "measured, stands in for it)"
        )
        return (
            f"no latency bound given: batches whose p99 stays within {LATENCY_MULTIPLE:g}x "
            f"{which}'s ({self.p99_ms:.2f} ms), queue delay at most {which}'s p50 "
            f"({self.p50_ms:.2f} ms){stand_in}"
        )


def reference(measured: list[dict[str, Any]]) -> Reference | None:
    """The reference batch of the default bound; None when no batch size has both
    latencies measured (then nothing bounds a batch by its latency)."""
    timed = {bs: r for bs, r in _rows(measured).items() if r.get("p50_ms") and r.get("p99_ms")}
    if not timed:
        return None
    bs = min(timed)
    return Reference(bs, float(timed[bs]["p50_ms"]), float(timed[bs]["p99_ms"]))


def best_batch(
    measured: list[dict[str, Any]], latency_bound_ms: float | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The measured row to serve at, and why (None when nothing was measured)."""
    rows = _rows(measured)
    if not rows:
        return None, []
    why = []
    ref = reference(measured) if latency_bound_ms is None else None
    if ref is not None:
        why.append(ref.words())
        limit = ref.p99_limit_ms
        bound = f" with p99 within {LATENCY_MULTIPLE:g}x batch {ref.batch_size}'s"
    elif latency_bound_ms is not None:
        limit, bound = latency_bound_ms, f" with p99 <= {latency_bound_ms:g} ms"
    else:
        limit, bound = math.inf, ""
        why.append("no latency measured at any batch size, so none bounds the batch size")
    # a row without a p99 meets no bound (inf), and is eligible only when none is set
    eligible = {bs: r for bs, r in rows.items() if _p99(r) <= limit}
    if not eligible:
        fastest = min(rows.values(), key=_p99)
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
    why.insert(0, f"measured in the run: {measured_words}")
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
    left_out = sorted(set(rows) - set(eligible))
    if left_out:
        why.append(
            "left out for their latency: "
            + ", ".join(f"batch {bs} (p99 {_p99(rows[bs]):.2f} ms)" for bs in left_out)
        )
    if best["batch_size"] == 1 and len(rows) > 1:
        why.append("batching off: batch 1, the best throughput" + bound)
    else:
        why.append(f"batch {best['batch_size']}: the best throughput{bound}")
    return best, why


def _delay(
    row: dict[str, Any], batch: int, latency_bound_ms: float | None, ref: Reference | None
) -> tuple[float, str]:
    """The queue delay for batches of up to `batch` rows, measured at `row`, and why."""
    delay = DELAY_FRACTION * float(row["p50_ms"])
    words = f"{DELAY_FRACTION:g} x batch {batch}'s p50 ({row['p50_ms']:.2f} ms)"
    if latency_bound_ms is not None:
        if row.get("p99_ms"):
            room = max(0.0, latency_bound_ms - float(row["p99_ms"]))
            if room < delay:
                delay, words = room, f"what the {latency_bound_ms:g} ms bound leaves over its p99"
    elif ref is not None and ref.p50_ms < delay:
        delay = ref.p50_ms
        words = f"batch {ref.batch_size}'s p50, the most it may add with no latency bound given"
    return delay, words


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
            ref = reference(measured) if latency_bound_ms is None else None
            max_queue_delay_ms, words = _delay(row, max_batch_size, latency_bound_ms, ref)
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
