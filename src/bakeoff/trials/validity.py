"""Whether a candidate's figures can be trusted: valid, noisy or invalid, and why
(docs/method.md §3 rule 10), from its rounds, the rest of its group's rounds and
what other processes used of the machine meanwhile (`machine_use`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bakeoff import environment
from bakeoff.judge import stats, verdict
from bakeoff.trials.entrant import Entrant
from bakeoff.trials.racing import raced_out_early


def set_validity(
    c: Entrant,
    min_rounds: int,
    objective: str,
    machine: dict[str, Any] | None = None,
    others: Sequence[Entrant] | None = None,
) -> None:
    """valid | noisy | invalid, with the reason (docs/method.md §3 rule 10).

    `machine` is what other processes used during the rounds (`machine_use`):
    over its gate the results are noisy. Under it, a wide spread that `others`
    (the rest of the group, measured in the same rounds) shared is the
    machine's drift, and one they did not share is the runtime's own. A
    runtime on a virtual clock (the fake one) is immune to all of it.
    """
    if c.status != "ok":
        c.validity, c.validity_reason = "invalid", f"{c.status}: {c.reason}"
        return
    rounds = len(c.rounds_ns)
    if rounds < min_rounds and not raced_out_early(c):
        c.validity = "invalid"
        c.validity_reason = f"only {rounds} rounds, fewer than the minimum {min_rounds}"
        return
    if c.settings.get("virtual_clock"):
        machine, others = None, None
    others_use = (
        f"other processes used {machine['other_cores_mean']:.2f} cores on average meanwhile"
        if machine
        else ""
    )
    cv = stats.round_to_round_cv(c.samples(), np.asarray(c.block_ns), objective)
    if cv > verdict.NOISY_CV:
        c.validity = "noisy"
        spread = (
            f"round-to-round spread of the {objective} is {cv:.0%} (gate {verdict.NOISY_CV:.0%})"
        )
        drift = _shared_drift(c, others or [], objective)
        if machine and machine["busy"]:
            cause = f"{others_use}, over the gate of {machine['gate_cores']:.2f}"
        elif drift is not None and drift.own_cv <= verdict.NOISY_CV:
            cause = (
                f"the other candidates' rounds moved with it (the machine's speed drifted "
                f"{drift.machine_cv:.0%} between rounds"
                + (f"; {others_use}" if others_use else "")
                + f"; its own spread is {drift.own_cv:.0%}), so the spread is the machine's: "
                "its absolute figures are uncertain, while comparisons, paired within "
                "rounds, cancel most of it"
            )
        elif not machine:
            cause = "the machine was busy or the runtime unstable"
        else:
            unshared = (
                ""
                if drift is None
                else f" and the other candidates' rounds did not move with it (its own "
                f"spread is {drift.own_cv:.0%})"
            )
            cause = (
                f"{others_use} (gate {machine['gate_cores']:.2f}),{unshared} so the spread is "
                "the runtime's own"
            )
        c.validity_reason = f"{spread}: {cause}"
        return
    if machine and machine["busy"]:
        c.validity = "noisy"
        c.validity_reason = (
            f"{others_use} (gate {machine['gate_cores']:.2f}): the machine was not quiet, "
            "even though the rounds agree"
        )
        return
    c.validity, c.validity_reason = "valid", ""


def _shared_drift(
    c: Entrant, others: Sequence[Entrant], objective: str
) -> stats.SharedDrift | None:
    def rounds_of(x: Entrant) -> np.ndarray:
        return stats.per_round(x.samples(), np.asarray(x.block_ns), objective)

    measured = [o for o in others if o is not c and o.status == "ok" and len(o.rounds_ns) >= 2]
    return stats.shared_drift(rounds_of(c), [rounds_of(o) for o in measured])


# Cores' worth of CPU that other processes may use, beyond the cores the
# measurement leaves free, before a group's results are flagged noisy.
BUSY_GATE_CORES = 0.25


def machine_use(rounds_cpu: list[dict[str, float]], threads: int) -> dict[str, Any] | None:
    """What other processes used of the machine during a group's rounds (docs/method.md rule 10)."""
    if not rounds_cpu:
        return None
    seconds = sum(r["seconds"] for r in rounds_cpu)
    other = sum(r["other_cores"] * r["seconds"] for r in rounds_cpu) / seconds
    steal = sum(r["steal_cores"] * r["seconds"] for r in rounds_cpu) / seconds
    # Others interfere only once they need cores the workers use: with 32 cores
    # and 2 threads measured, a busy neighbour on the other 30 is no noise.
    # Physical cores, since a process on the other hyperthread of a core the
    # worker runs on slows it down all the same.
    cores = environment.physical_cores()
    gate = max(0, cores - threads) + BUSY_GATE_CORES
    return {
        "rounds": len(rounds_cpu),
        "seconds": round(seconds, 3),
        "other_cores_mean": round(other, 3),
        "other_cores_max": max(r["other_cores"] for r in rounds_cpu),
        "steal_cores_mean": round(steal, 3),
        "gate_cores": gate,
        "busy": other > gate,
    }
