"""The generative server scenario (`--scenario server`): the highest request rate
each engine sustains within a time-to-first-token / time-per-output-token target.

Requests arrive as a Poisson process (`generators.arrivals`), served through each
engine's own scheduler (vLLM's continuous batching) or, for an engine without one,
a queue that forms static batches (or serves one at a time). For every engine that
passed the gate, after the TPOT race, `ServerSweep` searches the offered rate:
doubling from half the engine's own one-at-a-time capacity while the target is met
(halving, at most 3 times, while it is not), then bisecting between the highest rate met and the
lowest missed, then sending the highest met rate again with other seeds: the
engine's highest rate is the highest one met in every repeat. A rate is met when
the p99 TTFT (from arrival, queueing included) and the p99 TPOT are within the
target and the engine completed requests at 90% of the offered rate or more (it
keeps up).

The target (`--slo ttft_p99_ms=..,tpot_p99_ms=..`) defaults to 4x the reference's
p99 TTFT and 2x its p99 TPOT one request at a time, from this run's own rounds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError
from bakeoff.generation.candidate import REFERENCE, GenCandidate
from bakeoff.generation.messages import Arrivals
from bakeoff.judge import stats
from bakeoff.trials.jobs import Timed
from bakeoff.trials.launcher import Worker, WorkerFailed

SLO_KEYS = ("ttft_p99_ms", "tpot_p99_ms")
# The default target, over the reference's own p99 one request at a time.
FACTORS = {"ttft_p99_ms": 4.0, "tpot_p99_ms": 2.0}
KEEPS_UP = 0.9  # completed requests/s over offered, at least
MAX_GROWTH = 8  # doublings before the search stops looking for a rate it misses
# Halvings before it gives up on a rate it meets: each one doubles how long a send
# takes, and an engine that misses at an eighth of its own one-at-a-time rate misses
# alone (its requests barely queue there), which no lower rate changes.
MAX_SHRINK = 3


def parse_slo(text: str | None) -> dict[str, float]:
    """--slo as {key: ms}; either key may be left to its default."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = (p.strip() for p in part.partition("="))
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or key not in SLO_KEYS or not (math.isfinite(ms) and ms > 0):
            raise UserError(
                f"--slo: {part.strip()!r} is not KEY=MS with KEY one of {', '.join(SLO_KEYS)} "
                "and MS above 0, e.g. --slo ttft_p99_ms=200,tpot_p99_ms=20"
            )
        out[key] = ms
    return out


@dataclass(frozen=True)
class Target:
    ttft_p99_ms: float
    tpot_p99_ms: float
    how: dict[str, str]  # per key: given, or what it was derived from

    def to_json(self) -> dict[str, Any]:
        return {"ttft_p99_ms": self.ttft_p99_ms, "tpot_p99_ms": self.tpot_p99_ms, "how": self.how}


def _p99_ms(values: Sequence[int]) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), 99)) / 1e6


def target_for(candidates: Sequence[GenCandidate], given: dict[str, float]) -> Target:
    """The given target, the rest derived from the reference's rounds (else the
    first candidate's that has rounds)."""
    timed = [c for c in candidates if c.rounds_ns and c.ttft_ns]
    ref_id = GenCandidate(*REFERENCE).id
    basis = next((c for c in timed if c.id == ref_id), timed[0] if timed else None)
    values, how = dict(given), {k: "given (--slo)" for k in given}
    for key in SLO_KEYS:
        if key in values:
            continue
        if basis is None:
            raise UserError("--scenario server: no candidate was timed to derive a target from")
        samples = [
            t for r in (basis.ttft_ns if key == "ttft_p99_ms" else basis.rounds_ns) for t in r
        ]
        p99 = _p99_ms(samples)
        values[key] = round(FACTORS[key] * p99, 3)
        what = "TTFT" if key == "ttft_p99_ms" else "TPOT"
        how[key] = f"{FACTORS[key]:g}x {basis.id}'s p99 {what} one request at a time ({p99:.3g} ms)"
    return Target(values["ttft_p99_ms"], values["tpot_p99_ms"], how)


@dataclass(frozen=True)
class RateStep:
    """One offered rate, sent once: what the engine did with it."""

    rate: float  # offered requests/s
    seed: int
    requests: int
    ttft_ms: dict[str, float]  # p50, p99
    tpot_ms: dict[str, float]
    goodput: float  # requests/s that met both targets, over the schedule's span
    completed_per_s: float
    output_tokens_per_s: float
    mean_running: float
    met: bool

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in vars(self).items()}


def rate_step(timed: Timed, rate: float, seed: int, target: Target) -> RateStep:
    """A rate's figures from a worker's `Arrivals` reply."""
    ttft = np.asarray(timed.latency_ns, dtype=np.float64) / 1e6
    tpot = np.asarray(timed.extra["tpot_ns"], dtype=np.float64) / 1e6
    span_s = max(max(timed.extra["last_ns"]) / 1e9, 1e-9)
    good = int(np.sum((ttft <= target.ttft_p99_ms) & (tpot <= target.tpot_p99_ms)))
    arrived = timed.extra["arrived_ns"]
    offered = rate if len(arrived) < 2 else (len(arrived) - 1) / max(arrived[-1] / 1e9, 1e-9)
    completed = len(ttft) / span_s
    pct = {"ttft": np.percentile(ttft, [50, 99]), "tpot": np.percentile(tpot, [50, 99])}
    met = (
        pct["ttft"][1] <= target.ttft_p99_ms
        and pct["tpot"][1] <= target.tpot_p99_ms
        and completed >= KEEPS_UP * min(offered, rate)
    )
    return RateStep(
        rate=rate,
        seed=seed,
        requests=len(ttft),
        ttft_ms={"p50": float(pct["ttft"][0]), "p99": float(pct["ttft"][1])},
        tpot_ms={"p50": float(pct["tpot"][0]), "p99": float(pct["tpot"][1])},
        goodput=good / span_s,
        completed_per_s=completed,
        output_tokens_per_s=sum(timed.extra["tokens"]) / span_s,
        mean_running=float(np.mean(timed.extra["running_milli"])) / 1000,
        met=bool(met),
    )


Probe = Callable[[float, int], RateStep]  # (rate, seed) -> what the engine did


def search(
    probe: Probe,
    start: float,
    steps: int,
    repeats: int,
    out_of_time: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """The highest rate met in every repeat: a bracket by doubling or halving from
    `start`, `steps` geometric bisections, then `repeats` more sends of the highest
    met rate with other seeds (a rate met once but missed in a repeat gives way to
    the next lower one met, and becomes the rate missed). Once `out_of_time`, the
    bracket stops growing and narrowing and the repeats go to the highest rate met so
    far only: the result is coarser for it, and `stopped` says so."""
    tested: list[RateStep] = []

    def send(rate: float, seed: int = 0) -> RateStep:
        step = probe(rate, seed)
        tested.append(step)
        return step

    rate = start
    first = send(rate)
    lo, hi = (rate, None) if first.met else (None, rate)
    stopped = ""
    for _ in range(MAX_GROWTH if first.met else MAX_SHRINK):
        if lo is not None and hi is not None:
            break
        if out_of_time():
            stopped = "its share of the budget was spent before the bracket closed"
            break
        rate = rate * 2 if hi is None else rate / 2
        if send(rate).met:
            lo = rate if lo is None else max(lo, rate)
        else:
            hi = rate if hi is None else min(hi, rate)
    for done in range(steps if lo is not None and hi is not None else 0):
        assert lo is not None and hi is not None
        if out_of_time():
            stopped = f"its share of the budget was spent after {done} of {steps} bisections"
            break
        mid = math.sqrt(lo * hi)
        if send(mid).met:
            lo = mid
        else:
            hi = mid
    highest, goodputs = None, []
    # Down the rates met once, highest first, until one is met in every repeat.
    met_rates = sorted({s.rate for s in tested if s.met}, reverse=True)
    for rate in met_rates[: 1 if out_of_time() else None]:
        runs = [s for s in tested if s.rate == rate and s.met][:1]
        runs += [send(rate, seed) for seed in range(1, repeats + 1)]
        if all(s.met for s in runs):
            highest, goodputs = rate, [s.goodput for s in runs]
            break
        hi = rate if hi is None else min(hi, rate)
    doc: dict[str, Any] = {
        "tested": [s.to_json() for s in tested],
        "highest_rate": None,
        "stopped": stopped or "the bracket closed",
    }
    if highest is not None:
        good = stats.mean_interval(np.asarray(goodputs))
        doc["highest_rate"] = {
            "requests_per_s": round(highest, 4),
            # the search's resolution: met at the first, missed at the second
            "bracket": [round(highest, 4), None if hi is None else round(hi, 4)],
            "repeats": len(goodputs),
            "goodput": {
                "value": round(good.value, 4),
                "ci95": [round(good.lo, 4), round(good.hi, 4)],
            },
        }
    doc["lowest_missed"] = None if hi is None else round(hi, 4)
    return doc


class ServerSweep:
    """The engine's `after_race` in the server scenario: each candidate that passed
    the gate, alone on the machine in turn, through `search`."""

    def __init__(
        self,
        given: dict[str, float],
        requests: int,
        steps: int,
        repeats: int,
        timeout_s: float,
        note: Callable[[str], None],
        budget_s: float = math.inf,
        target_path: Path | None = None,
        changed: Callable[[GenCandidate], None] = lambda _: None,
    ) -> None:
        self.given, self.requests, self.steps, self.repeats = given, requests, steps, repeats
        self.timeout_s, self.note = timeout_s, note
        self.budget_s = budget_s  # each engine's share, for its search
        self.target: Target | None = None
        # Where the target is kept once derived: a resumed run judges every engine
        # against the one its first searches had, and keeps those searches.
        self.target_path, self.changed = target_path, changed

    def _target(self, candidates: list[GenCandidate]) -> tuple[Target, bool]:
        """The run's target, and whether it is the one kept from before a resume."""
        if self.target_path is not None and self.target_path.is_file():
            kept = json.loads(self.target_path.read_text())
            return Target(kept["ttft_p99_ms"], kept["tpot_p99_ms"], kept["how"]), True
        target = target_for(candidates, self.given)
        if self.target_path is not None:
            self.target_path.write_text(json.dumps(target.to_json()))
        return target, False

    def __call__(self, lanes: Sequence[tuple[GenCandidate, Worker]], /) -> set[str]:
        target, kept = self._target([c for c, _ in lanes])
        self.target = target
        self.note(
            f"server scenario: target p99 TTFT {target.ttft_p99_ms:.4g} ms "
            f"({target.how['ttft_p99_ms']}), p99 TPOT {target.tpot_p99_ms:.4g} ms "
            f"({target.how['tpot_p99_ms']}); {self.requests} Poisson arrivals per rate"
            + ("; kept from before the run was interrupted" if kept else "")
        )
        lost: set[str] = set()
        for c, worker in lanes:
            if kept and "tested" in c.server:
                self.note(f"{c.id}: its search finished before the interruption; kept")
                continue
            ends = time.monotonic() + self.budget_s
            try:
                found = search(
                    self._probe(c, worker, target),
                    0.5 * own_capacity(c),
                    self.steps,
                    self.repeats,
                    _after(ends),
                )
            except WorkerFailed as exc:
                lost.add(c.id)
                c.server = {"lost": f"its worker was lost in the server scenario: {exc}"}
                self.note(f"{c.id}: {c.server['lost']}")
                continue
            # an engine whose server path differs from its batches says so apart
            batching = c.settings.get("server_batching") or c.settings.get("batching", "")
            c.server = {"batching": batching, **found}
            self.changed(c)
        return lost

    def _probe(self, c: GenCandidate, worker: Worker, target: Target) -> Probe:
        def probe(rate: float, seed: int) -> RateStep:
            cmd = Arrivals(rate_per_s=rate, requests=self.requests, seed=seed)
            timed = Timed.from_json(worker.request(cmd, self.timeout_s))
            step = rate_step(timed, rate, seed, target)
            self.note(
                f"{c.id}: {rate:.3g} requests/s: p99 TTFT {step.ttft_ms['p99']:.3g} ms, "
                f"p99 TPOT {step.tpot_ms['p99']:.3g} ms, goodput {step.goodput:.3g}/s: "
                + ("met" if step.met else "missed")
            )
            return step

        return probe


def _after(deadline: float) -> Callable[[], bool]:
    return lambda: time.monotonic() > deadline


def own_capacity(c: GenCandidate) -> float:
    """Requests/s the engine answered one at a time in its TPOT rounds."""
    requests = sum(len(r) for r in c.ttft_ns)
    return max(requests / max(sum(c.block_ns) / 1e9, 1e-9), 1e-3)


def server_verdict(candidates: Sequence[GenCandidate], target: Target | None) -> dict[str, Any]:
    """The highest rate within the target: the leader is separated from another
    engine when that one missed the target at a rate the leader met in every repeat."""
    found = [c for c in candidates if c.status == "ok" and (c.server or {}).get("highest_rate")]
    verdict: dict[str, Any] = {
        "objective": "server_rate",
        "what": "the highest request rate within the target",
        "target": None if target is None else target.to_json(),
        "winner": None,
        "ranking": [],
        "ties": [],
    }
    if not found:
        verdict["headline"] = verdict["reason"] = "no engine met the target at any rate tried"
        return verdict
    ranked = sorted(found, key=lambda c: -c.server["highest_rate"]["requests_per_s"])
    leader = ranked[0]
    top = leader.server["highest_rate"]["requests_per_s"]
    ties = [
        c.id
        for c in ranked[1:]
        if c.server.get("lowest_missed") is None or c.server["lowest_missed"] > top
    ]
    good = leader.server["highest_rate"]["goodput"]
    headline = (
        f"{leader.id} sustains the highest request rate within the target: {top:.3g} requests/s "
        f"(goodput {good['value']:.3g}/s, CI {good['ci95'][0]:.3g}-{good['ci95'][1]:.3g}, met in "
        f"every repeat)"
    )
    if ties:
        headline += f", but is not separated from {', '.join(ties)} (none missed at {top:.3g}/s)"
    elif len(ranked) > 1:
        second = ranked[1]
        headline += (
            f"; {second.id} missed it at {second.server['lowest_missed']:.3g}/s "
            f"(its highest {second.server['highest_rate']['requests_per_s']:.3g}/s)"
        )
    verdict.update(
        winner=leader.id,
        ranking=[c.id for c in ranked],
        ties=ties,
        headline=headline + ".",
        reason=headline + ".",
    )
    return verdict
