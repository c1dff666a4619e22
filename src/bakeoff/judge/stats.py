"""Statistics on interleaved samples: percentiles and throughput with bootstrap CIs,
and paired ratios between candidates measured in the same rounds.

Samples are kept as a matrix (rounds x calls per round): every candidate runs a
fixed number of calls in each round. The bootstrap resamples whole rounds
(a block bootstrap), so drift between rounds widens the intervals honestly
instead of being averaged away, and two candidates are paired round by round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_BOOTSTRAP = 2000
SEED = 20261129
# Fewer samples than this and the percentile is an extrapolation, not a measurement.
MIN_SAMPLES = {"p50": 5, "p90": 20, "p99": 200, "mean": 5}


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (self.lo <= self.value <= self.hi) and np.isfinite(self.value):
            # Percentile intervals can exclude the point estimate on tiny samples;
            # widen to include it rather than print an interval that lies about it.
            object.__setattr__(self, "lo", min(self.lo, self.value))
            object.__setattr__(self, "hi", max(self.hi, self.value))

    def excludes(self, x: float) -> bool:
        return x < self.lo or x > self.hi


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def _resample(n_rounds: int, slots: np.ndarray | None = None) -> np.ndarray:
    """Bootstrap indices (replicates x rounds), hierarchical when rounds come from
    several worker processes.

    Two processes running the same model can differ by a few percent for good
    (memory layout, page placement): an effect of the process, not of the
    runtime. With `slots` (the process of each round), each replicate first
    resamples processes, then rounds within them, so that difference widens the
    CI instead of passing for a real one.
    """
    if slots is None or len(np.unique(slots[:n_rounds])) < 2:
        return _round_indices(n_rounds)
    slots = slots[:n_rounds]
    rng = _rng()
    groups = [np.flatnonzero(slots == u) for u in np.unique(slots)]
    idx = np.empty((N_BOOTSTRAP, n_rounds), dtype=np.int64)
    col = 0
    for group in groups:  # each original process's share of rounds...
        picks = rng.integers(0, len(groups), N_BOOTSTRAP)
        for k, source in enumerate(groups):  # ...is refilled from a resampled process
            rows = np.flatnonzero(picks == k)
            idx[np.ix_(rows, np.arange(col, col + len(group)))] = rng.choice(
                source, size=(len(rows), len(group))
            )
        col += len(group)
    return idx


def _round_indices(n_rounds: int, n_boot: int = N_BOOTSTRAP) -> np.ndarray:
    return _rng().integers(0, n_rounds, size=(n_boot, n_rounds))


# The bootstrap resamples whole rounds; beyond this many samples in all, each
# round is thinned to an evenly spaced subset for the CI only (point estimates
# use every sample). Fast models give ~10^5 samples per run, and 2000
# replicates of all of them would take seconds and gigabytes for no gain.
MAX_BOOTSTRAP_SAMPLES = 4000


def _thin(samples: np.ndarray) -> np.ndarray:
    rounds, per_round = samples.shape
    keep = max(1, MAX_BOOTSTRAP_SAMPLES // max(rounds, 1))
    if per_round <= keep:
        return samples
    idx = np.linspace(0, per_round - 1, keep).round().astype(int)
    return samples[:, idx]


class _Replicates:
    """The bootstrap replicates of a (rounds x calls) matrix, each the calls of the
    rounds one row of `idx` picked, without building them.

    A replicate's order statistic is found by bisection over the matrix's sorted
    values: how many of a replicate's calls lie at or below a value is its pick
    counts times each round's count at or below it. That costs replicates x rounds
    per step, where sorting or partitioning every replicate (what np.percentile
    does to the gathered replicates) costs replicates x calls: two orders of
    magnitude on a run's thinned 4,000 calls, and racing asks after every round.
    The results are np.percentile's and np.median's to the bit (tested).
    """

    def __init__(self, samples: np.ndarray, idx: np.ndarray) -> None:
        rounds = samples.shape[0]
        self.values = np.sort(samples, axis=None)
        by_round = np.sort(samples, axis=1)
        # at_most[r, i]: calls of round r at or below the i-th smallest value
        self.at_most = np.stack(
            [np.searchsorted(row, self.values, side="right") for row in by_round]
        )
        n_boot = len(idx)
        flat = (np.arange(n_boot)[:, None] * rounds + idx).reshape(-1)
        self.picks = np.bincount(flat, minlength=n_boot * rounds).reshape(n_boot, rounds)
        self.size = idx.shape[1] * samples.shape[1]  # calls in every replicate
        self.sums = samples.sum(axis=1)

    def order_statistic(self, rank: int) -> np.ndarray:
        """Each replicate's `rank`-th smallest call (0-based)."""
        lo = np.zeros(len(self.picks), dtype=np.int64)
        hi = np.full(len(self.picks), len(self.values) - 1, dtype=np.int64)
        while (lo < hi).any():
            mid = (lo + hi) // 2
            at_most = np.einsum("br,rb->b", self.picks, self.at_most[:, mid])
            above = at_most > rank
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid + 1)
        return self.values[lo]

    def percentile(self, q: float) -> np.ndarray:
        """np.percentile(replicate, q) of each replicate (its default, linear)."""
        virtual = (self.size - 1) * (q / 100)
        if virtual >= self.size - 1:
            return self.order_statistic(self.size - 1)
        below = int(np.floor(virtual))
        a, b = self.order_statistic(below), self.order_statistic(below + 1)
        gamma = virtual - below
        # numpy's own interpolation, step for step, so the result is its own
        diff = b - a
        return (b - diff * (1 - gamma)) if gamma >= 0.5 else (a + diff * gamma)

    def median(self) -> np.ndarray:
        """np.median(replicate) of each replicate."""
        half = self.size // 2
        if self.size % 2:
            return self.order_statistic(half)
        return (self.order_statistic(half - 1) + self.order_statistic(half)) / 2

    def mean(self) -> np.ndarray:
        return (self.picks @ self.sums) / self.size


def _ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


def latency_percentiles(
    samples_ns: np.ndarray, slots: np.ndarray | None = None
) -> dict[str, Interval]:
    """p50, p90, p99 and mean in ms, each with a block-bootstrap 95% CI."""
    rounds = samples_ns.shape[0]
    ms = samples_ns.astype(np.float64) / 1e6
    flat = ms.reshape(-1)
    boot = _Replicates(_thin(ms), _resample(rounds, slots))
    point = np.percentile(flat, [50, 90, 99])
    out = {
        name: Interval(float(point[i]), *_ci(boot.percentile(q)))
        for i, (name, q) in enumerate((("p50", 50), ("p90", 90), ("p99", 99)))
    }
    out["mean"] = Interval(float(flat.mean()), *_ci(boot.mean()))
    return out


def unsupported_percentiles(n: int) -> list[str]:
    return [name for name, need in MIN_SAMPLES.items() if n < need]


def throughput_point(calls: np.ndarray, block_ns: np.ndarray, batch_size: int) -> float:
    """Measured samples/s, without its CI: samples done over the timed blocks' wall time."""
    return float(calls.sum() * batch_size / (block_ns.astype(np.float64).sum() / 1e9))


def throughput(
    calls: np.ndarray, block_ns: np.ndarray, batch_size: int, slots: np.ndarray | None = None
) -> Interval:
    """Measured samples/s: samples done over wall time of the timed blocks (not 1/latency)."""
    samples = calls.astype(np.float64) * batch_size
    seconds = block_ns.astype(np.float64) / 1e9
    idx = _resample(len(calls), slots)
    boot = samples[idx].sum(axis=1) / seconds[idx].sum(axis=1)
    return Interval(throughput_point(calls, block_ns, batch_size), *_ci(boot))


def pair_slots(
    base_slots: np.ndarray | None, cand_slots: np.ndarray | None, rounds: int
) -> np.ndarray | None:
    """One cluster per combination of the two candidates' processes in a round."""
    if base_slots is None and cand_slots is None:
        return None
    b = np.zeros(rounds, np.int64) if base_slots is None else base_slots[:rounds]
    c = np.zeros(rounds, np.int64) if cand_slots is None else cand_slots[:rounds]
    return np.asarray(b * 1000 + c)


def paired_latency_ratio(
    base_ns: np.ndarray,
    cand_ns: np.ndarray,
    level: float = 0.95,
    slots: np.ndarray | None = None,
) -> Interval:
    """median(base) / median(cand), rounds resampled together: > 1 means cand is faster."""
    rounds = min(len(base_ns), len(cand_ns))
    base, cand = base_ns[:rounds].astype(np.float64), cand_ns[:rounds].astype(np.float64)
    idx = _resample(rounds, slots)
    b = _Replicates(_thin(base), idx).median()
    c = _Replicates(_thin(cand), idx).median()
    return Interval(float(np.median(base) / np.median(cand)), *_ci(b / c, level))


def paired_throughput_ratio(
    base_calls: np.ndarray,
    base_block_ns: np.ndarray,
    cand_calls: np.ndarray,
    cand_block_ns: np.ndarray,
    level: float = 0.95,
    slots: np.ndarray | None = None,
) -> Interval:
    """throughput(cand) / throughput(base), rounds resampled together: > 1 means cand is faster."""
    rounds = min(len(base_calls), len(cand_calls))
    bc, bt = base_calls[:rounds].astype(np.float64), base_block_ns[:rounds].astype(np.float64)
    cc, ct = cand_calls[:rounds].astype(np.float64), cand_block_ns[:rounds].astype(np.float64)
    idx = _resample(rounds, slots)
    ratio = (cc[idx].sum(1) / ct[idx].sum(1)) / (bc[idx].sum(1) / bt[idx].sum(1))
    point = (cc.sum() / ct.sum()) / (bc.sum() / bt.sum())
    return Interval(float(point), *_ci(ratio, level))


def coefficient_of_variation(samples_ns: np.ndarray) -> float:
    flat = samples_ns.astype(np.float64).reshape(-1)
    return float(flat.std() / flat.mean()) if flat.size > 1 and flat.mean() > 0 else 0.0


def per_round(samples_ns: np.ndarray, block_ns: np.ndarray, objective: str) -> np.ndarray:
    """The objective of each round: its median latency, or its calls per ns."""
    if objective == "latency":
        return np.median(samples_ns.astype(np.float64), axis=1)
    return samples_ns.shape[1] / block_ns.astype(np.float64)


def _cv(values: np.ndarray) -> float:
    mean = values.mean()
    return float(values.std(ddof=1) / mean) if len(values) > 1 and mean > 0 else 0.0


def round_to_round_cv(samples_ns: np.ndarray, block_ns: np.ndarray, objective: str) -> float:
    """Spread of the objective between rounds: what makes a comparison uncertain.

    Per-call CV mixes in the call-to-call jitter every runtime has; this is the
    CV of each round's median latency (or throughput) across rounds.
    """
    if len(samples_ns) < 2:
        return 0.0
    return _cv(per_round(samples_ns, block_ns, objective))


@dataclass(frozen=True)
class SharedDrift:
    """How much of a candidate's round-to-round spread the other candidates shared."""

    machine_cv: float  # spread of the rounds' common factor: the machine's drift
    own_cv: float  # the candidate's spread once that factor is divided out


def shared_drift(own: np.ndarray, others: list[np.ndarray]) -> SharedDrift | None:
    """Split a candidate's round-to-round spread into the machine's and its own.

    `own` and each of `others` are per-round objectives (`per_round`), indexed
    by round, measured in the same interleaved rounds. A round that is slow for
    every candidate alike (CPU frequency, a busy host the VM cannot see) is the
    machine's doing: its factor is the median, over the other candidates in
    that round, of their value relative to their own median. None without
    another candidate in at least two of the rounds.
    """
    if len(own) < 2:
        return None
    relative = [o / np.median(o) for o in others if len(o) >= 2]
    factor = np.ones(len(own))
    shared = 0
    for r in range(len(own)):
        in_round = [rel[r] for rel in relative if r < len(rel)]
        if in_round:
            factor[r] = float(np.median(in_round))
            shared += 1
    if shared < 2:
        return None
    return SharedDrift(_cv(factor), _cv(own / np.median(own) / factor))


def mean_interval(values: np.ndarray) -> Interval:
    """Mean of a few independent measurements (cold starts) with a bootstrap 95% CI."""
    values = values.astype(np.float64)
    idx = _rng().integers(0, len(values), size=(N_BOOTSTRAP, len(values)))
    return Interval(float(values.mean()), *_ci(values[idx].mean(axis=1)))
