"""A generative run's options: what the flags ask for, stored with the run so that
`bakeoff run --resume RUN_ID` runs with the same ones again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakeoff.paths import DEFAULT_STORE

# Requests submitted together in the sweep; one at a time is the TPOT rounds' own.
CONCURRENCY = (2, 4, 8)


@dataclass(frozen=True)
class GenerateOptions:
    runtimes: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    quick: bool = False
    store: Path = DEFAULT_STORE
    threads: int | None = None
    trial_timeout_s: float = 600.0
    budget_s: float | None = None  # the rounds' budget (default 90 s, --quick 30 s)
    concurrency: tuple[int, ...] = CONCURRENCY
    # "server": after the TPOT race, the highest request rate each engine sustains
    # within the target `slo` (generation.server_scenario), instead of the sweep
    scenario: str = "latency"
    slo: dict[str, float] = field(default_factory=dict)

    def to_settings(self) -> dict[str, Any]:
        """What the run's stored settings keep of its options (all but the store,
        which a resume names itself)."""
        return {
            "runtimes": None if self.runtimes is None else list(self.runtimes),
            "precisions": None if self.precisions is None else list(self.precisions),
            "quick": self.quick,
            "threads": self.threads,
            "trial_timeout_s": self.trial_timeout_s,
            "budget_s": self.budget_s,
            "concurrency": list(self.concurrency),
            "scenario": self.scenario,
            "slo": dict(self.slo),
        }

    @classmethod
    def from_settings(cls, settings: dict[str, Any], store: str | Path) -> GenerateOptions:
        """The options a stored run was started with (`options` in its settings), with
        the threads it resolved."""
        o = settings["options"]

        def names(key: str) -> tuple[str, ...] | None:
            return None if o[key] is None else tuple(o[key])

        return cls(
            runtimes=names("runtimes"),
            precisions=names("precisions"),
            quick=bool(o["quick"]),
            store=Path(store),
            # the threads it was measured with, not this machine's default now
            threads=int(settings["threads"]),
            trial_timeout_s=float(o["trial_timeout_s"]),
            budget_s=o["budget_s"],
            concurrency=tuple(int(n) for n in o["concurrency"]),
            scenario=str(o["scenario"]),
            slo={k: float(v) for k, v in o["slo"].items()},
        )
