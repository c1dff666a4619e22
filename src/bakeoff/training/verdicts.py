"""The training verdicts: samples/s by the inference judge, time to the target over
seeds (MLPerf's olympic mean), the lowest peak memory; and parity, which flags a
stack whose final metric falls below the reference stack's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bakeoff.judge.verdict import Measured, brief, decide
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.recipe import Recipe
from bakeoff.trials.settings import TrialSettings


def throughput_verdict(
    candidates: list[TrainCandidate], recipe: Recipe, s: TrialSettings
) -> dict[str, Any]:
    measured = [
        Measured(
            c.id, c.samples(), np.asarray(c.block_ns), recipe.batch_size, np.asarray(c.round_slots)
        )
        for c in candidates
        if c.status == "ok" and c.rounds_ns
    ]
    not_ok = {c.id: f"{c.status}: {c.reason}" for c in candidates if c.status != "ok"}
    v = decide(
        recipe.batch_size,
        "throughput",
        measured,
        recipe.reference,
        not_ok,
        margin=s.margin,
        min_rounds=s.min_rounds,
    ).to_dict()
    return brief(v, "samples_per_s", v["reason"])


def time_to_target_score(values: list[float], n_seeds: int) -> dict[str, Any] | None:
    """MLPerf's olympic mean over 5 or more seeds (drop the fastest and slowest; at
    most one seed that never reached the target, counted as the slowest), else the
    mean; None when too many seeds missed the target."""
    missed = n_seeds - len(values)
    if n_seeds >= 5:
        if missed > 1:
            return None
        ordered = sorted(values) + [math.inf] * missed
        kept = ordered[1:-1]
        return {"score": float(np.mean(kept)), "method": "olympic", "spread": float(np.ptp(kept))}
    if missed:
        return None
    return {"score": float(np.mean(values)), "method": "mean", "spread": float(np.ptp(values))}


def check_parity(candidates: list[TrainCandidate], recipe: Recipe) -> None:
    """A stack whose mean final metric is more than the tolerance below the
    reference stack's is flagged, as the inference gate rejects a variant."""
    finals = {
        c.stack: [
            s["final_metric"]
            for s in c.trained_seeds()
            if not s["diverged"] and s["final_metric"] is not None
        ]
        for c in candidates
    }
    ref = finals.get(recipe.reference)
    if not ref:
        return
    ref_mean = float(np.mean(ref))
    for c in candidates:
        mine = finals.get(c.stack)
        if c.status == "ok" and mine and ref_mean - float(np.mean(mine)) > recipe.tolerance:
            c.set_status(
                "flagged",
                f"mean final {recipe.target_metric} {np.mean(mine):.4f} is more than "
                f"{recipe.tolerance:.0%} below the reference's {ref_mean:.4f}",
            )


def _verdict(
    objective: str, ranking: list[dict[str, Any]], none_why: str, reference: str
) -> dict[str, Any]:
    """A verdict over the stacks' documents, best first, before its ratio and ties."""
    return {
        "objective": objective,
        "winner": ranking[0]["id"] if ranking else None,
        "baseline": reference,
        "ratio": None,
        "ranking": [d["id"] for d in ranking],
        "ties": [],
        "reason": "" if ranking else none_why,
    }


def time_to_target_verdict(docs: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    """Fastest to the target over seeds; a bootstrap over seeds gives the ratio's CI
    against the reference (seeds are few: the CI says how little they settle)."""
    scored = [d for d in docs if d["status"] == "ok" and d["time_to_target_s"]]
    ranking = sorted(scored, key=lambda d: d["time_to_target_s"]["score"])
    base = next((d for d in docs if d["stack"] == reference and d["time_to_target_s"]), None)
    out = _verdict(
        "time_to_target", ranking, "no stack reached the target in enough seeds", reference
    )
    if ranking and base is not None:
        win = ranking[0]
        a = np.array(
            [s["time_to_target_s"] for s in base["seeds"] if s["time_to_target_s"] is not None]
        )
        b = np.array(
            [s["time_to_target_s"] for s in win["seeds"] if s["time_to_target_s"] is not None]
        )
        ratio = base["time_to_target_s"]["score"] / win["time_to_target_s"]["score"]
        rng = np.random.default_rng(0)
        boot = [rng.choice(a, len(a)).mean() / rng.choice(b, len(b)).mean() for _ in range(2000)]
        lo, hi = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
        out["ratio"] = {"value": ratio, "ci95": [lo, hi]}
        if win["id"] != base["id"] and lo <= 1.0:
            out["ties"] = [[win["id"], base["id"]]]
            out["reason"] = "the CI over seeds includes 1: not separated from the reference"
    return out


# Peak resident memory is one reading per stack, not a sample: stacks within this
# share of the lowest are tied with it.
MEMORY_TIE = 0.05


def memory_verdict(docs: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    """Lowest peak memory: all of a stack's processes together (its ranks' sum),
    from the throughput worker; within 5% of the lowest is a tie."""
    scored = [d for d in docs if d["status"] == "ok" and d["peak_rss_mb"]]
    ranking = sorted(scored, key=lambda d: d["peak_rss_mb"]["sum"])
    base = next((d for d in scored if d["stack"] == reference), None)
    out = _verdict("peak_memory", ranking, "no stack measured", reference)
    if not ranking:
        return out
    low = ranking[0]["peak_rss_mb"]["sum"]
    tied = [d["id"] for d in ranking if d["peak_rss_mb"]["sum"] <= low * (1 + MEMORY_TIE)]
    if len(tied) > 1:
        out["ties"] = [tied]
        out["reason"] = f"within {MEMORY_TIE:.0%} of the lowest peak: {', '.join(tied)}"
    if base is not None:
        # The reference's peak over the winner's (above 1: the winner needs less).
        out["ratio"] = {"value": base["peak_rss_mb"]["sum"] / low, "ci95": None}
    return out
