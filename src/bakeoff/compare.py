"""`bakeoff compare RUN_A RUN_B`: did anything get faster or slower between two runs?

This module reads both runs from their stores and hands judge.compare what each
candidate measured; report.compare prints the result (`print_comparison`).
Environment differences come first, since they explain most changes. Then, per
candidate id measured in both runs, the ratio B/A of the objective the verdict
used (p50 latency at batch 1, throughput above, unless the workload said
otherwise): see judge.compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.judge import verdict
from bakeoff.judge.compare import Comparison, Row, candidate_change, default_margin, differences
from bakeoff.report.data import StoredRun, load

__all__ = ["Comparison", "Row", "compare", "compare_runs"]

# Fields that change from minute to minute on the same machine: not a difference.
_VOLATILE = {"load_average", "cpu.frequency_mhz"}
_SETTINGS = (
    "workload_ref",
    "threads",
    "quick",
    "budget_s",
    "scenario",
    "margin",
    "cold_starts",
    "seed",
    "runtimes",
    "precisions",
    "batch_sizes",
)
# Figures measured with the settings (calls per round is sized to each run's
# speed; import and compile times) differ from run to run: not settings.
_MEASURED_SETTINGS = {"calls_per_round", "settle_calls", "import_s", "compile_s"}


def compare(
    run_a: str,
    run_b: str,
    store: str | Path,
    margin: float | None = None,
    store_b: str | Path | None = None,
) -> Comparison:
    """Run B is read from `store_b` when given (a baseline kept in another store, e.g.
    one saved by an earlier CI job), else from the same store as run A."""
    return compare_runs(load(run_a, store), load(run_b, store_b or store), margin)


def compare_runs(a: StoredRun, b: StoredRun, margin: float | None = None) -> Comparison:
    if margin is None:
        margin = default_margin(float(a.settings.get("margin", verdict.DEFAULT_MARGIN)))
    if not 0.0 <= margin < 0.5:
        from bakeoff.errors import UserError

        raise UserError(f"--margin must be in [0, 0.5), got {margin}")
    ca = {c["id"]: c for c in a.candidates}
    cb = {c["id"]: c for c in b.candidates}
    both = [cid for cid in ca if cid in cb]
    # Bonferroni over the candidates compared, as the verdict does over its
    # comparisons: a regression gate checking many candidates at 95% each would
    # cry wolf on one of them every few runs.
    level = verdict.comparison_level(len(both) + 1)
    out = Comparison(a.run_id, b.run_id, margin, level)
    out.environment = differences(a.environment, b.environment, _VOLATILE)
    out.settings = differences(
        {k: a.settings.get(k) for k in _SETTINGS}, {k: b.settings.get(k) for k in _SETTINGS}
    )
    out.only_a = [cid for cid in ca if cid not in cb]
    out.only_b = [cid for cid in cb if cid not in ca]
    for cid in both:
        diffs = differences(ca[cid].get("settings") or {}, cb[cid].get("settings") or {})
        diffs = [d for d in diffs if d.key not in _MEASURED_SETTINGS]
        if diffs:
            out.runtime_settings[cid] = diffs
        row = _row(a, b, ca[cid], cb[cid], level, margin)
        if isinstance(row, str):
            out.not_compared[cid] = row
        else:
            out.rows.append(row)
    return out


def _row(
    a: StoredRun, b: StoredRun, ca: dict[str, Any], cb: dict[str, Any], level: float, margin: float
) -> Row | str:
    """One candidate's change from run A to run B, or why it is not compared."""
    train = a.settings.get("kind") == "train"
    why = _not_comparable(ca, cb, train)
    if why:
        return why
    if train:
        return _train_row(a, b, ca, cb, level, margin)
    bs = int(ca["batch_size"])
    objective = a.objective(bs)
    if b.objective(bs) != objective:
        return f"the runs used different objectives ({objective} in A, {b.objective(bs)} in B)"
    ma, mb = a.measured(ca), b.measured(cb)
    if ma is None or mb is None:
        return "its measured rounds are not in the store"
    va, vb = _value(ca, objective), _value(cb, objective)
    return candidate_change(ca["id"], objective, ma, mb, va, vb, level, margin)


def _train_row(
    a: StoredRun, b: StoredRun, ca: dict[str, Any], cb: dict[str, Any], level: float, margin: float
) -> Row | str:
    """A training stack: B/A of its samples/s over the timed rounds (a step is one
    global batch), with the same bootstrap as an inference candidate's throughput."""
    batches = [(r.document or {})["workload"]["global_batch"] for r in (a, b)]
    if batches[0] != batches[1]:
        return f"the global batch differs ({batches[0]} in A, {batches[1]} in B)"
    ma = a.measured({**ca, "batch_size": batches[0]})
    mb = b.measured({**cb, "batch_size": batches[1]})
    if ma is None or mb is None:
        return "its measured rounds are not in the store"
    va, vb = ca["samples_per_s"]["value"], cb["samples_per_s"]["value"]
    return candidate_change(ca["id"], "throughput", ma, mb, va, vb, level, margin)


def _value(c: dict[str, Any], objective: str) -> float:
    if objective == "latency":
        return float(c["latency_ms"]["p50"])
    return float(c["throughput"]["samples_per_s"])


def _state(c: dict[str, Any]) -> str:
    """A candidate that is not ok, in words: a pending one belongs to an unfinished run."""
    if c["status"] == "pending":
        return "not finished (the run was interrupted)"
    return f"{c['status']}: {c['reason']}" if c["reason"] else c["status"]


def _not_comparable(a: dict[str, Any], b: dict[str, Any], train: bool = False) -> str:
    if a["status"] != "ok" and (a["status"], a["reason"]) == (b["status"], b["reason"]):
        return f"in both runs {_state(a)}"
    for name, c in (("A", a), ("B", b)):
        if c["status"] != "ok":
            return f"in {name} {_state(c)}"
        measured = c.get("samples_per_s") if train else c.get("latency_ms") and c.get("throughput")
        if not measured:
            return f"not measured in {name}"
    return ""
