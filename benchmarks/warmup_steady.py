"""Is the warm-up long enough? For each candidate of a stored run, its warm-up
calls by when they ended (0-0.25 s, 0.25-0.5 s, later), each window's median over
the median of the candidate's measured rounds; `1st` is the warm-up's first call.

A window near 1.00 is steady state already; a later window nearer 1.00 than an
earlier one is warm-up the rounds would otherwise have measured. The default
warm-up is 0.5 s (docs/method.md rule 4); a run with a longer one (`warmup_s`
in its settings) shows whether the later part changed anything.

    .venv/bin/python benchmarks/warmup_steady.py RUN_ID [--store .bakeoff/bakeoff.db]
"""

from __future__ import annotations

import argparse

import numpy as np

from bakeoff.paths import DEFAULT_STORE
from bakeoff.store import Store

WINDOWS = ((0.0, 0.25), (0.25, 0.5), (0.5, float("inf")))


def windows(warmup_ns: np.ndarray, rounds_median_ns: float) -> list[str]:
    """Each window's median over the rounds' median, with its count of calls."""
    ended_s = np.cumsum(warmup_ns) / 1e9
    cells = []
    for lo, hi in WINDOWS:
        inside = warmup_ns[(ended_s > lo) & (ended_s <= hi)]
        if len(inside):
            cells.append(f"{np.median(inside) / rounds_median_ns:5.2f} ({len(inside):3d})")
        else:
            cells.append(f"{'-':>5} (  0)")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--store", default=str(DEFAULT_STORE))
    args = parser.parse_args()
    with Store(args.store) as store:
        run = store.run(args.run_id)
        print(f"run {args.run_id}: warm-up window median / rounds median (calls)")
        print(f"{'candidate':36s} {'1st':>6s} {'0-0.25 s':>12s} {'0.25-0.5 s':>12s} {'later':>12s}")
        worst = 0.0
        for cand in run["candidates"]:
            cid = cand["id"]
            warm = store.samples(args.run_id, cid, kind="warmup")
            rounds = store.rounds(args.run_id, cid)
            if not warm or not rounds:
                continue
            median = float(np.median([np.median(lat) for _, lat, _, _ in rounds]))
            first = warm[0][0] / median
            cells = windows(warm[0], median)
            print(f"{cid:36s} {first:6.2f} " + " ".join(f"{c:>12s}" for c in cells))
            late = warm[0][np.cumsum(warm[0]) / 1e9 > WINDOWS[0][1]]
            if len(late):
                worst = max(worst, abs(float(np.median(late)) / median - 1))
        print(f"worst gap after the first 0.25 s: {worst:.1%} from the rounds' median")


if __name__ == "__main__":
    main()
