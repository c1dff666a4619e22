"""`auto`'s serving settings (`bakeoff.export.auto`), on synthetic measured rows:
what `bakeoff serve` runs with and `bakeoff export --format triton` writes. Pure
functions, no server."""

from __future__ import annotations

import pytest

from bakeoff.export import auto, triton


def _row(bs: int, sps: float, p50: float, p99: float, streams: int | None = None) -> dict:
    return {
        "candidate": f"c-b{bs}",
        "batch_size": bs,
        "p50_ms": p50,
        "p99_ms": p99,
        "samples_per_s": sps,
        "offline_streams": streams,
        "offline_samples_per_s": sps * 1.5 if streams else None,
    }


# The case reported in issue 44: batch 32 gives more throughput than batch 1, but at
# about 28x its p99. Without a bound it was served with batches of 32 and a 120 ms delay.
REPORTED = [_row(1, 111.0, 9.0, 10.0), _row(32, 120.0, 240.0, 281.0)]
# Batch 4 stays within the multiple of batch 1's p99; batch 32 does not.
MODERATE = [
    _row(1, 1000.0, 1.0, 1.2),
    _row(4, 2500.0, 1.6, 2.0, streams=2),
    _row(32, 4000.0, 8.0, 12.0),
]


def test_no_bound_keeps_a_batch_far_slower_than_batch_1_out() -> None:
    chosen = auto.choose(REPORTED, 32, None, None, None)
    assert (chosen.max_batch_size, chosen.max_queue_delay_ms) == (1, 0.0)
    assert (
        "no latency bound given: batches whose p99 stays within "
        f"{auto.LATENCY_MULTIPLE:g}x batch 1's (10.00 ms), queue delay at most batch 1's p50 "
        "(9.00 ms)"
    ) in chosen.why
    assert "left out for their latency: batch 32 (p99 281.00 ms)" in chosen.why
    # batch 32 forced by hand: the delay is still held to batch 1's p50, not 0.5 x 240 ms
    forced = auto.choose(REPORTED, 32, 32, None, None)
    assert forced.max_batch_size == 32 and forced.max_queue_delay_ms == pytest.approx(9.0)
    assert any("batch 1's p50, the most it may add" in w for w in forced.why)


def test_no_bound_chooses_a_moderate_batch_within_the_multiple() -> None:
    one, four, thirty_two = (r["p99_ms"] for r in MODERATE)
    assert four <= auto.LATENCY_MULTIPLE * one < thirty_two  # the premise of the case
    chosen = auto.choose(MODERATE, 1, None, None, None)
    assert chosen.max_batch_size == 4 and chosen.instances == 2
    assert chosen.max_queue_delay_ms == pytest.approx(0.8)  # 0.5 x batch 4's p50 < 1 ms
    assert any("batch 4: the best throughput with p99 within" in w for w in chosen.why)
    # a batch whose half p50 exceeds batch 1's p50: the delay is held to the latter
    slower = [MODERATE[0], _row(4, 2500.0, 2.2, 2.3)]
    assert auto.choose(slower, 1, None, None, None).max_queue_delay_ms == pytest.approx(1.0)


def test_without_batch_1_the_smallest_measured_batch_is_the_reference() -> None:
    measured = [_row(4, 500.0, 3.0, 3.5), _row(8, 900.0, 5.0, 6.5), _row(32, 1000.0, 20.0, 25.0)]
    ref = auto.reference(measured)
    assert ref is not None and (ref.batch_size, ref.p50_ms, ref.p99_ms) == (4, 3.0, 3.5)
    chosen = auto.choose(measured, 4, None, None, None)
    assert chosen.max_batch_size == 8
    assert chosen.max_queue_delay_ms == pytest.approx(2.5)  # 0.5 x 5 ms, under batch 4's 3 ms
    assert any("batch 1 was not measured for this variant: batch 4" in w for w in chosen.why)


def test_an_explicit_bound_overrides_the_default_rule() -> None:
    bound = auto.choose(REPORTED, 32, None, None, None, latency_bound_ms=300.0)
    assert bound.max_batch_size == 32
    # half batch 32's p50 (120 ms), within what 300 ms leaves over its 281 ms p99: 19 ms
    assert bound.max_queue_delay_ms == pytest.approx(19.0)
    assert not any("no latency bound given" in w for w in bound.why)
    loose = auto.choose(MODERATE, 1, None, None, None, latency_bound_ms=20.0)
    assert loose.max_batch_size == 32 and loose.max_queue_delay_ms == pytest.approx(4.0)
    tight = auto.choose(MODERATE, 1, None, None, None, latency_bound_ms=2.5)
    assert tight.max_batch_size == 4 and tight.instances == 2
    assert tight.max_queue_delay_ms == pytest.approx(0.5)  # 2.5 ms bound - 2 ms p99 < 0.8 ms
    given = auto.choose(MODERATE, 1, 8, 0.5, 3)
    assert (given.max_batch_size, given.max_queue_delay_ms, given.instances) == (8, 0.5, 3)


def test_auto_turns_batching_off_when_it_does_not_pay() -> None:
    measured = [_row(1, 1000.0, 1.0, 1.2), _row(32, 1010.0, 30.0, 33.0)]
    chosen = auto.choose(measured, 32, None, None, None, latency_bound_ms=100.0)
    assert (chosen.max_batch_size, chosen.max_queue_delay_ms, chosen.instances) == (1, 0.0, 1)
    assert any("batching off: batch 32 gave 1.01x" in w for w in chosen.why)
    # A gain beyond the tie margin, however small, is kept: held to batch 1 the server
    # could not reach the variant's best throughput.
    gains = [_row(1, 1000.0, 1.0, 1.2), _row(32, 1050.0, 30.0, 33.0)]
    assert auto.choose(gains, 32, None, None, None, latency_bound_ms=100.0).max_batch_size == 32
    cheap = [_row(1, 1000.0, 1.0, 1.2), _row(2, 1050.0, 1.8, 2.0)]  # within the multiple
    assert auto.choose(cheap, 2, None, None, None).max_batch_size == 2


def _triton_config(measured: list[dict]) -> triton.Config:
    cand = {"id": "x-b1", "runtime": "onnxruntime", "batch_size": 1, "settings": {}}
    load = {"intra_op_num_threads": 2, "inter_op_num_threads": 1}
    x = triton.Tensor("x", "TYPE_FP32", (-1, 8))
    y = triton.Tensor("y", "TYPE_FP32", (-1, 2))
    return triton.config("m", "onnxruntime", [x], [y], None, cand, load, measured, [], [])


def test_the_triton_config_follows_the_same_rule() -> None:
    reported = _triton_config(REPORTED)
    assert reported.max_batch_size == 1 and reported.dynamic_batching is None
    assert "# no latency bound given: batches whose p99 stays within" in reported.text
    assert "# left out for their latency: batch 32" in reported.text
    moderate = _triton_config(MODERATE)
    assert moderate.max_batch_size == 4
    assert moderate.dynamic_batching == {
        "preferred_batch_size": [4],
        "max_queue_delay_microseconds": 800,
    }
    assert "a lone request pays up to 0.80 ms over its own run" in moderate.text
