"""A run's options: what the flags ask for, checked, stored with the run so a resume
runs the same way again, and turned into the trial engine's settings."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.backends import runtime_names
from bakeoff.errors import UserError, did_you_mean
from bakeoff.paths import DEFAULT_STORE
from bakeoff.trials.settings import TrialSettings
from bakeoff.workload import PRECISIONS, ConstraintsSpec

SCENARIOS = ("latency", "server", "offline")


@dataclass(frozen=True)
class RunOptions:
    runtimes: list[str] | None = None
    precisions: list[str] | None = None
    batch_sizes: list[int] | None = None
    budget_s: float | None = None
    trial_timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    quick: bool = False
    store: str | Path = DEFAULT_STORE
    json_path: str | Path | None = None
    threads: int | None = None
    seed: int = 0
    margin: float | None = None  # overrides the workload's [search] margin
    ci_target: float | None = None  # overrides the workload's [search] ci_target
    fixed_seconds: float | None = None  # benchmark comparator: no rounds, no racing
    scenario: str = "latency"  # latency | server | offline
    latency_bound_ms: float = 100.0  # server scenario: the p99 bound
    cold_starts: int = 1  # fresh processes per candidate for cold start figures
    # The deployment target whose advice picks the candidates when nothing else
    # does (None: detected, see advise.default_target).
    target: str | None = None
    # Limits a winner must meet (max_p99_ms ...), each replacing the workload's own.
    constraints: dict[str, float] | None = None
    # A fresh worker for each (variant, batch size), loaded one at a time and
    # quality-checked at its own batch size: slower; every cold start isolated.
    worker_per_batch_size: bool = False
    # A split's share (`bakeoff run --split`): the candidates this run measures, by their
    # id without the batch size ("onnxruntime-int8-dynamic", a label); None: all.
    share: list[str] | None = None
    # `--data`: the data file of a model file or folder given alone (None: made for it).
    data: str | None = None

    def to_settings(self) -> dict[str, Any]:
        """What a run's stored settings keep of its options: all a resume needs to
        run the same way again (see `_STORED`)."""
        return {key: getattr(self, name) for key, name in _STORED.items()}

    @classmethod
    def from_settings(
        cls,
        settings: dict[str, Any],
        store: str | Path = DEFAULT_STORE,
        json_path: str | Path | None = None,
    ) -> RunOptions:
        """The options `to_settings` stored, for a run kept in `store`; what runs stored
        before an option was stored lack runs with its default."""
        default = {name: getattr(cls(), name) for name in _STORED.values()}
        default.update(_BEFORE_IT_WAS_STORED)
        stored = {name: settings.get(key, default[name]) for key, name in _STORED.items()}
        return cls(**stored, store=store, json_path=json_path)


# RunOptions fields under their keys in a run's stored settings. Not stored: where
# the run is kept and its JSON written (a resume is told), build_timeout_s and
# fixed_seconds (a resume runs with their defaults).
_STORED = {
    "batch_sizes": "batch_sizes",
    "threads": "threads",
    "quick": "quick",
    "budget_s": "budget_s",
    "trial_timeout_s": "trial_timeout_s",
    "seed": "seed",
    "explicit_runtimes": "runtimes",
    "explicit_precisions": "precisions",
    "margin": "margin",
    "ci_target": "ci_target",
    "scenario": "scenario",
    "latency_bound_ms": "latency_bound_ms",
    "cold_starts": "cold_starts",
    "target": "target",
    "explicit_constraints": "constraints",
    "worker_per_batch_size": "worker_per_batch_size",
    "split_share": "share",
    "data": "data",
}


# The RunOptions fields a run stores: everything that says how it runs.
STORED_FIELDS = frozenset(_STORED.values())

# An option whose default changed when it began to be stored: a run stored before
# it ran the old way, and a resume goes on that way.
_BEFORE_IT_WAS_STORED: dict[str, Any] = {"worker_per_batch_size": True}


def _check_choices(values: list[str] | None, allowed: tuple[str, ...], flag: str) -> None:
    for v in values or []:
        if v not in allowed:
            raise UserError(
                f"{flag}: unknown value {v!r}{did_you_mean(v, allowed)}; "
                f"expected one of {', '.join(allowed)}"
            )


def _check_numbers(opts: RunOptions) -> None:
    if opts.batch_sizes is not None and any(b < 1 for b in opts.batch_sizes):
        raise UserError("--batch-sizes: every batch size must be a positive integer")
    if opts.cold_starts < 1:
        raise UserError("--cold-starts must be at least 1")
    if opts.budget_s is not None and not opts.budget_s > 0:
        raise UserError(f"--budget: seconds of measuring, a positive number, got {opts.budget_s}")
    if not opts.trial_timeout_s > 0:
        raise UserError(
            f"--trial-timeout: a positive number of seconds, got {opts.trial_timeout_s}"
        )
    if opts.threads is not None and opts.threads < 1:
        raise UserError(f"--threads must be at least 1, got {opts.threads}")
    if opts.margin is not None and not 0.0 <= opts.margin < 0.5:
        raise UserError(f"--margin must be in [0, 0.5), got {opts.margin}")
    if opts.ci_target is not None and not 0.0 < opts.ci_target < 0.5:
        raise UserError(f"--ci-target must be in (0, 0.5), got {opts.ci_target}")
    if opts.fixed_seconds is not None and not opts.fixed_seconds > 0:
        raise UserError(f"fixed_seconds must be positive, got {opts.fixed_seconds}")


def checked(opts: RunOptions) -> RunOptions:
    """The options as given, with `--precisions all` spelled out; a UserError names
    the first flag whose value cannot be run."""
    _check_choices(opts.runtimes, runtime_names(), "--runtimes")
    if opts.precisions == ["all"]:
        opts = dataclasses.replace(opts, precisions=list(PRECISIONS))
    _check_choices(opts.precisions, PRECISIONS, "--precisions")
    _check_numbers(opts)
    for key, limit in (opts.constraints or {}).items():
        if key not in ConstraintsSpec.model_fields:
            raise UserError(
                f"unknown constraint {key!r}; expected one of "
                + ", ".join(ConstraintsSpec.model_fields)
            )
        if not limit > 0:
            raise UserError(f"--{key.replace('_', '-')} must be positive, got {limit:g}")
    if opts.scenario not in SCENARIOS:
        raise UserError(
            f"--scenario: expected one of {', '.join(SCENARIOS)}, got {opts.scenario!r}"
        )
    if opts.scenario != "latency":
        _require_loadgen(opts.scenario)
    if opts.scenario == "server" and opts.latency_bound_ms <= 0:
        raise UserError("--latency-bound-ms must be positive")
    return opts


def _require_loadgen(scenario: str) -> None:
    import importlib.util

    if importlib.util.find_spec("mlperf_loadgen") is None:
        from bakeoff.inference.loadgen import INSTALL

        raise UserError(f"--scenario {scenario} needs MLPerf LoadGen: {INSTALL}")


@dataclass(frozen=True)
class ScenarioSettings:
    """What the scenarios after the rounds (server, offline) and the repeated cold
    starts need, beside the trial engine's settings."""

    scenario: str = "latency"  # latency | server | offline
    server_bound_ms: float = 100.0  # the server scenario's p99 bound
    server_duration_s: float = 10.0
    server_steps: int = 6
    offline_duration_s: float = 5.0
    cold_starts: int = 1  # fresh processes per candidate (1: the measuring one)
    cpus: tuple[int, ...] | None = None  # CPUs each worker pins itself to


def scenario_settings(opts: RunOptions) -> ScenarioSettings:
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else None
    if opts.fixed_seconds is not None:
        return ScenarioSettings(cpus=cpus)
    return ScenarioSettings(
        scenario=opts.scenario,
        server_bound_ms=opts.latency_bound_ms,
        server_duration_s=3.0 if opts.quick else 10.0,
        server_steps=5 if opts.quick else 7,
        offline_duration_s=2.0 if opts.quick else 5.0,
        cold_starts=opts.cold_starts,
        cpus=cpus,
    )


def trial_settings(opts: RunOptions, threads: int, n_groups: int) -> TrialSettings:
    """The engine's settings for one batch-size group of `n_groups` (the budget is
    shared out between them); objective, margin and constraints come per group."""
    budget = opts.budget_s if opts.budget_s is not None else (40.0 if opts.quick else 120.0)
    if opts.fixed_seconds is not None:
        # The way common tools measure: 10 warm-up calls, then one long block per
        # candidate, one candidate after the other. Kept for comparison only.
        return TrialSettings(
            threads=threads,
            trial_timeout_s=max(opts.trial_timeout_s, 3 * opts.fixed_seconds),
            warmup_s=0.0,
            warmup_calls=10,
            slice_s=opts.fixed_seconds,
            settle_s=0.0,
            min_rounds=1,
            max_rounds=1,
            budget_s=float("inf"),
            seed=opts.seed,
            racing=False,
        )
    return TrialSettings(
        threads=threads,
        trial_timeout_s=opts.trial_timeout_s,
        # Half a second, once 1 s: in two MiniLM runs (7 runtimes, batch 1 and 32) every
        # candidate's warm-up calls after the first were within 4% of its rounds'
        # median already in the first 0.25 s, so the second half second only cost
        # 0.5 s per candidate and batch size (7 s of the default run).
        warmup_s=0.3 if opts.quick else 0.5,
        warmup_calls=2 if opts.quick else 3,
        slice_s=0.25,
        settle_s=0.05,
        min_rounds=5 if opts.quick else 8,
        max_rounds=15 if opts.quick else 60,
        budget_s=budget / max(1, n_groups),
        seed=opts.seed,
    )
