"""Candidates: runtime x precision (x method) x batch size, and their results.

A `Candidate` is the orchestrator's mutable record while a run is in flight;
`candidate_document` turns it into the JSON the store and `--json` carry
(`Candidate.to_json` plus the figures computed from its rounds), and
`Candidate.from_json` reads it back.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bakeoff.backends import Variant, get_backend
from bakeoff.candidate_core import CandidateCore
from bakeoff.judge import stats
from bakeoff.judge.constraints import Figure, Figures
from bakeoff.judge.quality import Quality


@dataclass
class Candidate(CandidateCore):
    """One variant at one batch size: the inference bake-off's candidate. Its
    measuring worker's record (`worker`) also says which batch sizes that process
    was timed at, where it ran the quality pass and what its first call came after."""

    variant: Variant
    batch_size: int
    label: str | None = None  # set for hand-written candidates
    options: dict[str, Any] = field(default_factory=dict)
    # What a reader of its figures must know although it runs (e.g. a precision
    # this CPU emulates): from the backend's offer, shown beside the results.
    notes: list[str] = field(default_factory=list)
    artifact: dict[str, Any] = field(default_factory=dict)
    build_s: float | None = None
    quality: Quality | None = None
    quality_alt: Quality | None = None  # at the second shape, when axes are variable
    # The workload's [constraints] this measured candidate breaks: not eligible to win.
    constraint_violations: list[str] = field(default_factory=list)
    # Not measured until the engine says otherwise (the other kinds leave it empty).
    validity: str = field(default="invalid", kw_only=True)
    validity_reason: str = field(default="not measured", kw_only=True)
    server: dict[str, Any] | None = None  # the server scenario's result, when run
    offline: dict[str, Any] | None = None  # the offline scenario's sweep, when run
    cold_starts: dict[str, list[float]] = field(default_factory=dict)  # repeated, fresh
    cold_start_error: str = ""
    # How close its throughput came to this machine's GEMM peak (bakeoff.efficiency:
    # flops_per_sample, achieved_gflops, peak_gflops, fraction); None: not counted.
    efficiency: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"{self.label or self.variant.id}-b{self.batch_size}"

    def set_status(self, status: str, reason: str = "") -> None:
        if status in ("rejected", "failed", "unavailable") and not reason:
            raise ValueError(f"a {status} candidate needs a reason")
        super().set_status(status, reason)

    def figures(self, keys: Collection[str] = ()) -> Figures:
        """What the [constraints] limit, from the measurements themselves, as the
        document reports them (`candidate_document`); latency percentiles, whose
        bootstrap costs, only when `keys` names one."""
        latency = {"p50": Figure(None), "p99": Figure(None)}
        samples = self.samples()
        if {"max_p50_ms", "max_p99_ms"} & set(keys) and self.rounds_ns and samples.size:
            slots = np.asarray(self.round_slots, dtype=np.int64) if self.round_slots else None
            pct = stats.latency_percentiles(samples, slots)
            unsupported = stats.unsupported_percentiles(int(samples.size))
            for q in latency:
                lo, hi = _ci_pair(pct[q])
                latency[q] = Figure(round(pct[q].value, 6), (lo, hi), q in unsupported)
        cold = _cold_start(self)
        load, first = cold.get("load"), cold.get("first_call")
        return Figures(
            p50_ms=latency["p50"],
            p99_ms=latency["p99"],
            peak_memory_mb=Figure(self.peak_mb()),
            model_size_mb=Figure(self.size_mb()),
            cold_start_s=Figure(None if load is None or first is None else load + first),
        )

    def peak_mb(self) -> float | None:
        """Peak memory as the document reports it."""
        return None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1)

    def size_mb(self) -> float | None:
        """The artifact's size on disk as the document reports it."""
        return None if self.model_bytes is None else round(self.model_bytes / 2**20, 3)

    def samples_per_s(self) -> float | None:
        """Measured throughput, the document's figure without its CI (no bootstrap)."""
        samples = self.samples()
        if not self.rounds_ns or not samples.size:
            return None
        calls = np.full(samples.shape[0], samples.shape[1])
        return round(stats.throughput_point(calls, np.asarray(self.block_ns), self.batch_size), 4)

    def to_json(self) -> dict[str, Any]:
        """What the candidate document records of the candidate itself; `from_json`
        reads it back. Not in it: the measured rounds and warm-up calls (the store
        keeps them as trials), the artifact beyond its exporter and cache use, and
        the figures computed from the rounds (`candidate_document` adds those)."""
        second = self.quality_alt
        return {
            "id": self.id,
            "runtime": self.variant.runtime,
            "precision": self.variant.precision,
            "method": self.variant.method,
            "label": self.label,
            "options": self.options,
            "batch_size": self.batch_size,
            "status": self.status,
            "reason": self.reason,
            "notes": self.notes,
            "validity": self.validity,
            "validity_reason": self.validity_reason,
            "stopped": self.stopped,
            "constraint_violations": self.constraint_violations,
            "server": self.server,
            "offline": self.offline,
            "quality": None if self.quality is None else self.quality.to_json(),
            "quality_second_shape": None if second is None else second.to_json(),
            "peak_rss_mb": self.peak_mb(),
            "model_size_mb": self.size_mb(),
            "cold_start_s": _cold_start(self),
            "worker": self.worker,
            "exporter": self.artifact.get("exporter"),
            # True: every build step came from the variant cache; None: nothing to build.
            "cache_hit": self.artifact.get("cache_hit"),
            "settings": self.settings,
            "efficiency": self.efficiency,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Candidate:
        """A candidate from its document (`to_json`, or a whole `candidate_document`:
        the figures and the id are computed, not read). Keys a document older than
        them lacks take their defaults."""
        cold = doc.get("cold_start_s") or {}
        quality, second = doc.get("quality"), doc.get("quality_second_shape")
        size_mb = doc.get("model_size_mb")
        # Repeated cold starts: each process's figures; the first is the measuring one.
        repeats = {
            key: list(cold[f"{key}_samples"])
            for key in ("load", "first_call", "import")
            if f"{key}_samples" in cold
        }
        return cls(
            Variant(doc["runtime"], doc["precision"], doc.get("method")),
            int(doc["batch_size"]),
            label=doc.get("label"),
            options=dict(doc.get("options") or {}),
            status=doc["status"],
            reason=doc.get("reason", ""),
            notes=list(doc.get("notes") or []),
            artifact={k: doc[k] for k in ("exporter", "cache_hit") if doc.get(k) is not None},
            build_s=cold.get("build"),
            settings=dict(doc.get("settings") or {}),
            quality=None if quality is None else Quality.from_json(quality),
            quality_alt=None if second is None else Quality.from_json(second),
            load_s=repeats["load"][0] if "load" in repeats else cold.get("load"),
            first_call_s=repeats["first_call"][0]
            if "first_call" in repeats
            else cold.get("first_call"),
            peak_rss_mb=doc.get("peak_rss_mb"),
            model_bytes=None if size_mb is None else round(size_mb * 2**20),
            stopped=doc.get("stopped", ""),
            constraint_violations=list(doc.get("constraint_violations") or []),
            validity=doc.get("validity", "invalid"),
            validity_reason=doc.get("validity_reason", "not measured"),
            server=doc.get("server"),
            offline=doc.get("offline"),
            cold_starts=repeats,
            cold_start_error=cold.get("error", ""),
            efficiency=doc.get("efficiency"),
            worker=dict(doc.get("worker") or {}),
        )


def enumerate_candidates(
    runtimes: list[str],
    precisions: list[str],
    batch_sizes: list[int],
    model_kind: str,
    left_out: frozenset[str] = frozenset(),
) -> list[Candidate]:
    """Every combination, with unavailable ones kept and explained, never dropped;
    except the variant ids in `left_out`, which the advice said why it left out."""
    out: list[Candidate] = []
    for runtime in runtimes:
        backend = get_backend(runtime)
        available = backend.availability()
        for precision in precisions:
            offers = backend.offers(precision, model_kind)
            for offer in offers:
                if offer.variant.id in left_out:
                    continue
                for bs in batch_sizes:
                    c = Candidate(offer.variant, bs, notes=[offer.note] if offer.note else [])
                    if not available.available:
                        c.set_status(
                            "unavailable", f"{available.reason}; install: {available.install}"
                        )
                    elif offer.reason:
                        c.set_status("unavailable", offer.reason)
                    out.append(c)
    return out


def explicit_candidates(
    specs: list[Any],
    runtimes: list[str] | None,
    precisions: list[str] | None,
    batch_sizes: list[int],
    model_kind: str,
) -> list[Candidate]:
    """Hand-written candidates; the --runtimes/--precisions flags filter them."""
    out: list[Candidate] = []
    for spec in specs:
        if runtimes and spec.runtime not in runtimes:
            continue
        if precisions and spec.precision not in precisions:
            continue
        backend = get_backend(spec.runtime)
        available = backend.availability()
        offers = backend.offers(spec.precision, model_kind)
        chosen = next(
            (o for o in offers if spec.method in (None, o.variant.method)),
            None,
        )
        for bs in spec.batch_sizes or batch_sizes:
            if chosen is None:
                methods = ", ".join(str(o.variant.method) for o in offers)
                c = Candidate(
                    Variant(spec.runtime, spec.precision, spec.method),
                    bs,
                    spec.label,
                    dict(spec.options),
                )
                c.set_status(
                    "unavailable",
                    f"{spec.runtime} has no {spec.precision} method {spec.method!r} "
                    f"(offers: {methods})",
                )
            else:
                c = Candidate(chosen.variant, bs, spec.label, dict(spec.options))
                c.notes = [chosen.note] if chosen.note else []
                if not available.available:
                    c.set_status("unavailable", f"{available.reason}; install: {available.install}")
                elif chosen.reason:
                    c.set_status("unavailable", chosen.reason)
            out.append(c)
    return out


def _cold_start(c: Candidate) -> dict[str, Any]:
    """Build, load and first call; with repeats, their means and bootstrap CIs."""
    out: dict[str, Any] = {"build": c.build_s, "load": c.load_s, "first_call": c.first_call_s}
    if c.settings.get("import_s") is not None:
        # The import statements run while loading (the runtime's libraries, the
        # model's code): part of the load time, reported apart.
        out["import"] = c.settings["import_s"]
    if c.settings.get("compile_s") is not None:
        # Compiled in `load` for the batch shape (jax.jit, XLA, TVM, TensorRT): part of
        # the load time, reported apart; steady-state latency never includes it.
        out["compile"] = c.settings["compile_s"]
    if len(c.cold_starts.get("load", [])) > 1:
        out["repeats"] = len(c.cold_starts["load"])
        for key in ("load", "first_call", "import"):
            if len(c.cold_starts.get(key, [])) != out["repeats"]:
                continue  # not recorded for every repeat
            iv = stats.mean_interval(np.asarray(c.cold_starts[key]))
            out[key] = round(iv.value, 6)
            out[f"{key}_samples"] = [round(x, 6) for x in c.cold_starts[key]]
            out[f"{key}_ci95"] = _ci_pair(iv)
    elif c.worker:
        why = not_isolated(c)
        out["isolated"] = not why
        if why:
            out["not_isolated"] = why
    if c.cold_start_error:
        out["error"] = c.cold_start_error
    return out


def not_isolated(c: Candidate) -> str:
    """Why its measuring worker's load and first call are no cold start measured
    alone ("" when they are): repeated cold starts then use fresh processes only."""
    reasons = []
    first = c.worker.get("first_call", "cold")
    if first != "cold":
        reasons.append(f"its first call came {first}, in the same process")
    if c.worker.get("loaded_alone") is False:
        reasons.append("it loaded beside other candidates")
    return "; ".join(reasons)


def _ci_pair(iv: stats.Interval) -> list[float]:
    return [round(iv.lo, 6), round(iv.hi, 6)]


def candidate_document(c: Candidate) -> dict[str, Any]:
    """The candidate in the result document: `Candidate.to_json`, with its latency and
    throughput figures (None until it has measured rounds) after its quality."""
    state = c.to_json()
    keys = list(state)
    at = keys.index("peak_rss_mb")
    doc: dict[str, Any] = {k: state[k] for k in keys[:at]}
    doc["latency_ms"] = None
    doc["throughput"] = None
    doc.update({k: state[k] for k in keys[at:]})
    samples = c.samples()
    if c.rounds_ns and samples.size:
        slots = np.asarray(c.round_slots, dtype=np.int64) if c.round_slots else None
        pct = stats.latency_percentiles(samples, slots)
        n = int(samples.size)
        doc["latency_ms"] = {
            **{k: round(iv.value, 6) for k, iv in pct.items()},
            "n": n,
            "rounds": int(samples.shape[0]),
            "calls_per_round": int(samples.shape[1]),
            "ci95": {k: _ci_pair(iv) for k, iv in pct.items()},
            "unsupported": stats.unsupported_percentiles(n),
            "cv": round(stats.coefficient_of_variation(samples), 4),
        }
        thr = stats.throughput(
            np.full(samples.shape[0], samples.shape[1]),
            np.asarray(c.block_ns),
            c.batch_size,
            slots,
        )
        doc["latency_ms"]["processes"] = len(set(c.round_slots)) or 1
        doc["throughput"] = {"samples_per_s": round(thr.value, 4), "ci95": _ci_pair(thr)}
    return doc
