"""`bakeoff compare RUN_A RUN_B`: did anything get faster or slower between two runs?

Environment differences come first, since they explain most changes. Then, per
candidate id measured in both runs, the ratio B/A of the objective the verdict
used (p50 latency at batch 1, throughput above, unless the workload said
otherwise), with a block-bootstrap CI from the verdict's own code, and a word:
faster, slower, same (the CI inside the equivalence margin) or undecided (the
CI straddles a margin edge: more rounds are needed to tell).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.judge import verdict
from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun, load

if TYPE_CHECKING:
    from rich.console import Console

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
# The default margin for 'same' between two runs. A run's CI covers its rounds,
# not the process: two runs of one unchanged workload here differed by 3-4% for
# some candidates, with round CIs under 1% wide (memory layout, frequency), so a
# run-to-run margin of the verdict's 2% calls that noise a change.
RUN_TO_RUN_MARGIN = 0.05
_MEASURED_SETTINGS = {"calls_per_round", "settle_calls", "import_s", "compile_s"}
_WORDS = {"faster": "faster", "slower": "slower", "equivalent": "same", "undecided": "undecided"}


@dataclass(frozen=True)
class Difference:
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class Row:
    candidate: str
    objective: str
    a: float  # the objective in run A: ms (latency) or samples/s (throughput)
    b: float
    ratio: float  # B/A of the objective
    ratio_lo: float
    ratio_hi: float
    change: str  # faster | slower | same | undecided
    slower_by_pct: float  # how much slower B is (0 when not slower), from the point estimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "objective": self.objective,
            "a": self.a,
            "b": self.b,
            "ratio_b_over_a": self.ratio,
            "ci": [self.ratio_lo, self.ratio_hi],
            "change": self.change,
        }


@dataclass
class Comparison:
    run_a: str
    run_b: str
    margin: float
    level: float
    environment: list[Difference] = field(default_factory=list)
    settings: list[Difference] = field(default_factory=list)
    runtime_settings: dict[str, list[Difference]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    not_compared: dict[str, str] = field(default_factory=dict)

    def regressions(self, pct: float) -> list[Row]:
        """Candidates slower by more than `pct` percent with the CI excluding that much."""
        limit = 1.0 - pct / 100.0
        return [r for r in self.rows if _speed_ci(r)[1] < limit]

    def to_dict(self) -> dict[str, Any]:
        def diffs(items: list[Difference]) -> list[dict[str, Any]]:
            return [{"key": d.key, "a": d.a, "b": d.b} for d in items]

        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "margin": self.margin,
            "ci_level": self.level,
            "environment_differences": diffs(self.environment),
            "settings_differences": diffs(self.settings),
            "runtime_settings_differences": {k: diffs(v) for k, v in self.runtime_settings.items()},
            "candidates": [r.to_dict() for r in self.rows],
            "only_in_a": self.only_a,
            "only_in_b": self.only_b,
            "not_compared": self.not_compared,
        }


def _speed_ci(row: Row) -> tuple[float, float]:
    """How many times as fast B is as A (> 1: faster), as a CI."""
    if row.objective == "latency":  # the ratio is of times: invert it
        return 1.0 / row.ratio_hi, 1.0 / row.ratio_lo
    return row.ratio_lo, row.ratio_hi


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _diff(a: dict[str, Any], b: dict[str, Any], skip: set[str] | None = None) -> list[Difference]:
    fa, fb = _flatten(a), _flatten(b)
    keys = sorted(set(fa) | set(fb))
    return [
        Difference(k, fa.get(k), fb.get(k))
        for k in keys
        if k not in (skip or set()) and fa.get(k) != fb.get(k)
    ]


def _value(c: dict[str, Any], objective: str) -> float:
    if objective == "latency":
        return float(c["latency_ms"]["p50"])
    return float(c["throughput"]["samples_per_s"])


def compare_runs(a: StoredRun, b: StoredRun, margin: float | None = None) -> Comparison:
    if margin is None:
        margin = max(float(a.settings.get("margin", verdict.DEFAULT_MARGIN)), RUN_TO_RUN_MARGIN)
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
    out.environment = _diff(a.environment, b.environment, _VOLATILE)
    out.settings = _diff(
        {k: a.settings.get(k) for k in _SETTINGS}, {k: b.settings.get(k) for k in _SETTINGS}
    )
    out.only_a = [cid for cid in ca if cid not in cb]
    out.only_b = [cid for cid in cb if cid not in ca]
    for cid in both:
        diffs = _diff(ca[cid].get("settings") or {}, cb[cid].get("settings") or {})
        # Figures measured with the settings (calls per round is sized to each run's
        # speed; import and compile times) differ from run to run: not settings.
        diffs = [d for d in diffs if d.key not in _MEASURED_SETTINGS]
        if diffs:
            out.runtime_settings[cid] = diffs
        why = _not_comparable(ca[cid], cb[cid])
        if why:
            out.not_compared[cid] = why
            continue
        bs = int(ca[cid]["batch_size"])
        objective = a.objective(bs)
        if b.objective(bs) != objective:
            out.not_compared[cid] = (
                f"the runs used different objectives ({objective} in A, {b.objective(bs)} in B)"
            )
            continue
        ma, mb = a.measured(ca[cid]), b.measured(cb[cid])
        if ma is None or mb is None:
            out.not_compared[cid] = "its measured rounds are not in the store"
            continue
        # speedup(A, B) is "times as fast" (> 1: B faster); pairing round i of A
        # with round i of B is arbitrary, but the runs are independent, so
        # resampling them together is resampling each on its own.
        sp = verdict.speedup(ma, mb, objective, level)
        va, vb = _value(ca[cid], objective), _value(cb[cid], objective)
        if objective == "latency":
            ratio, lo, hi = 1.0 / sp.value, 1.0 / sp.hi, 1.0 / sp.lo
        else:
            ratio, lo, hi = sp.value, sp.lo, sp.hi
        change = _WORDS[verdict.compare(sp, margin)]
        out.rows.append(
            Row(cid, objective, va, vb, ratio, lo, hi, change, max(0.0, (1 - sp.value) * 100))
        )
    return out


def _state(c: dict[str, Any]) -> str:
    """A candidate that is not ok, in words: a pending one belongs to an unfinished run."""
    if c["status"] == "pending":
        return "not finished (the run was interrupted)"
    return f"{c['status']}: {c['reason']}" if c["reason"] else c["status"]


def _not_comparable(a: dict[str, Any], b: dict[str, Any]) -> str:
    if a["status"] != "ok" and (a["status"], a["reason"]) == (b["status"], b["reason"]):
        return f"in both runs {_state(a)}"
    for name, c in (("A", a), ("B", b)):
        if c["status"] != "ok":
            return f"in {name} {_state(c)}"
        if not c.get("latency_ms") or not c.get("throughput"):
            return f"not measured in {name}"
    return ""


def print_comparison(cmp: Comparison, out: Console) -> None:
    """The comparison as text: differences first, then one row per candidate."""
    from rich.table import Table

    out.print(f"[bold]compare {cmp.run_a} (A) -> {cmp.run_b} (B)[/]", highlight=False)
    diffs = cmp.environment + cmp.settings
    if diffs:
        out.print("[bold yellow]the runs differ in:[/]")
        for d in diffs:
            out.print(f"  {d.key}: {d.a!r} -> {d.b!r}", highlight=False)
    else:
        out.print("same environment fingerprint and settings")
    for cid, ds in cmp.runtime_settings.items():
        text = ", ".join(f"{d.key} {d.a!r} -> {d.b!r}" for d in ds)
        out.print(f"  {cid} runtime settings: {text}", highlight=False)
    t = Table(title=f"B/A of the objective ({cmp.level:.1%} CI; 'same' within +-{cmp.margin:.0%})")
    for col in ("candidate", "objective", "A", "B", "B/A [CI]", "change"):
        t.add_column(col)
    style = {"faster": "green", "slower": "red", "same": "", "undecided": "yellow"}
    for r in cmp.rows:
        unit = "ms p50" if r.objective == "latency" else "samples/s"
        t.add_row(
            r.candidate,
            r.objective,
            f"{num(r.a)} {unit}",
            f"{num(r.b)} {unit}",
            f"{r.ratio:.3f} [{r.ratio_lo:.3f}-{r.ratio_hi:.3f}]",
            f"[{style[r.change]}]{r.change}[/]" if style[r.change] else r.change,
        )
    out.print(t)
    for cid, why in cmp.not_compared.items():
        out.print(f"  {cid}: not compared ({why})", highlight=False)
    if cmp.only_a:
        out.print(f"only in A: {', '.join(cmp.only_a)}", highlight=False)
    if cmp.only_b:
        out.print(f"only in B: {', '.join(cmp.only_b)}", highlight=False)


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
