"""The learning-rate schedule every training stack takes its rates from."""

from __future__ import annotations

import math

import pytest

from bakeoff.stacks.schedule import Schedule


def test_constant_is_the_base_rate_after_its_warm_up() -> None:
    assert [Schedule(0.1).at(i) for i in (0, 5, 10_000)] == [0.1, 0.1, 0.1]
    warm = Schedule(0.1, "constant", warmup=4, total=10)
    assert [warm.at(i) for i in range(6)] == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1])


def test_linear_and_cosine_fall_towards_zero_and_hold_the_last_rate_past_the_end() -> None:
    linear = Schedule(1.0, "linear", warmup=2, total=6)
    # Warm-up 0.5, 1; then 4 steps from 1 down: 1, 0.75, 0.5, 0.25; past the end the
    # last step's 0.25 holds (never 0, where an update would change nothing).
    assert [linear.at(i) for i in range(8)] == pytest.approx(
        [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.25, 0.25]
    )
    cosine = Schedule(2.0, "cosine", total=4)
    expected = [1.0 + math.cos(math.pi * i / 4) for i in range(4)]
    assert [cosine.at(i) for i in range(4)] == pytest.approx(expected)
    assert cosine.at(2) == pytest.approx(1.0)
    assert cosine.at(10) == cosine.at(3) == pytest.approx(1.0 - math.sqrt(0.5))


def test_a_schedule_says_what_it_is_and_refuses_a_warm_up_as_long_as_the_recipe() -> None:
    assert Schedule(0.002, "cosine", 5, 60).words() == (
        "cosine from 0.002 towards 0 over 60 steps, after 5 warm-up steps"
    )
    assert Schedule(0.01).words() == "constant 0.01"
    with pytest.raises(ValueError, match="warm-up of 60 updates"):
        Schedule(0.1, "linear", warmup=60, total=60)
    with pytest.raises(ValueError, match="no learning-rate schedule 'step'"):
        Schedule(0.1, "step", total=60)
