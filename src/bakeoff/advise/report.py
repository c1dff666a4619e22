"""The advice for one workload and target: every rule applied in order (`RULES`), its
proposals kept where bakeoff can build them here (`collect` asks each backend's
availability and offers) and everything else excluded with why, gathered in an
`AdviceReport` that `bakeoff advise` prints and a run's grid is read from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bakeoff.advise.facts import Facts, facts_for_ref
from bakeoff.advise.rules import (
    GOALS,
    NOT_MEASURED,
    TARGETS,
    Advice,
    Context,
    Rule,
    rule_custom_architecture,
    rule_generative_llm,
    rule_jax,
    rule_keras,
    rule_reference,
    rule_savedmodel,
    rule_tflite,
    rule_torch_compile,
    rule_transformer_deployment,
)
from bakeoff.advise.rules_machine import (
    rule_cpu_bf16,
    rule_cpu_int8,
    rule_small_model,
    rule_training,
)
from bakeoff.advise.rules_target import rule_target
from bakeoff.backends import REFERENCES
from bakeoff.errors import UserError
from bakeoff.workload import PRECISIONS


@dataclass(frozen=True)
class Proposal:
    runtime: str
    precision: str
    methods: tuple[str, ...]
    reason: str
    advice: str  # the advice id


@dataclass(frozen=True)
class Exclusion:
    what: str
    why: str
    advice: str
    installable: bool = False  # only missing a package here: a run shows it as unavailable


@dataclass
class AdviceReport:
    target: str
    target_source: str  # "stated" or "detected"
    goal: str | None
    train: bool
    facts: Facts
    advice: list[Advice]
    proposed: list[Proposal]
    excluded: list[Exclusion]

    def run_grid(self) -> tuple[list[str], list[str]]:
        """Runtimes and precisions for a run: proposed ones, plus runtimes only missing
        a package (they then show as unavailable with the install line, as before)."""
        runtimes: list[str] = []
        precisions: set[str] = set()
        for p in self.proposed:
            if p.runtime not in runtimes:
                runtimes.append(p.runtime)
            precisions.add(p.precision)
        for e in self.excluded:
            if e.installable and e.what not in runtimes:
                runtimes.append(e.what)
        return runtimes, [p for p in PRECISIONS if p in precisions]

    def left_out_methods(self) -> dict[str, str]:
        """Variant ids (runtime-precision-method) that the advice keeps out of a run
        although their runtime and precision are proposed, with why."""
        prefixes = tuple(f"{p.runtime}-{p.precision}-" for p in self.proposed)
        return {e.what: e.why for e in self.excluded if e.what.startswith(prefixes)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "target_source": self.target_source,
            "goal": self.goal,
            "train": self.train,
            "facts": asdict(self.facts),
            "facts_line": self.facts.describe(),
            "proposed": [asdict(p) for p in self.proposed],
            "excluded": [asdict(e) for e in self.excluded],
            "advice": [a.to_dict() for a in self.advice],
        }


# The rules, in the order their advice is shown.
RULES: tuple[Rule, ...] = (
    rule_reference,
    rule_torch_compile,
    rule_transformer_deployment,
    rule_generative_llm,
    rule_custom_architecture,
    rule_keras,
    rule_jax,
    rule_savedmodel,
    rule_tflite,
    rule_target,
    rule_cpu_int8,
    rule_cpu_bf16,
    rule_small_model,
    rule_training,
)


def _backend_check(runtime: str, precision: str, kind: str) -> tuple[str, Any]:
    """("ok", methods) | ("not-registered", why) | ("missing", why) | ("offer", why)."""
    from bakeoff.backends import get_backend

    try:
        backend = get_backend(runtime)
    except KeyError:
        return "not-registered", f"bakeoff has no {runtime} backend ({NOT_MEASURED})"
    available = backend.availability()
    if not available.available:
        return "missing", f"{available.reason}; install: {available.install}"
    offers = backend.offers(precision, kind)
    usable = [o for o in offers if o.reason is None]
    if not usable:
        return "offer", "; ".join(str(o.reason) for o in offers) or f"no {precision} variant"
    return "ok", tuple(o.variant.method or "default" for o in usable)


def collect(advice: list[Advice], kind: str) -> tuple[list[Proposal], list[Exclusion]]:
    """Proposals that bakeoff can build here; everything else excluded with why."""
    proposed: dict[tuple[str, str], Proposal] = {}
    excluded: dict[str, Exclusion] = {}
    for a in advice:
        for what, why in a.excludes:
            excluded.setdefault(what, Exclusion(what, why, a.id))
    for a in advice:
        for runtime, precision in a.proposes:
            key = (runtime, precision)
            if key in proposed or runtime in excluded or precision in excluded:
                continue
            state, detail = _backend_check(runtime, precision, kind)
            if state == "ok":
                methods = tuple(m for m in detail if f"{runtime}-{precision}-{m}" not in excluded)
                proposed[key] = Proposal(runtime, precision, methods, a.reason, a.id)
            elif state == "offer":
                excluded.setdefault(
                    f"{runtime}-{precision}", Exclusion(f"{runtime}-{precision}", detail, a.id)
                )
            else:
                excluded.setdefault(
                    runtime, Exclusion(runtime, detail, a.id, installable=state == "missing")
                )
    return list(proposed.values()), list(excluded.values())


def default_target(facts: Facts) -> str:
    if facts.gpus:
        return "server-gpu"
    if facts.apple_silicon:
        return "apple"
    return "server-cpu"


def advise_facts(
    facts: Facts,
    target: str | None = None,
    goal: str | None = None,
    train: bool = False,
    baseline_ms: float | None = None,
) -> AdviceReport:
    if target is not None and target not in TARGETS:
        raise UserError(f"--target: expected one of {', '.join(TARGETS)}, got {target!r}")
    if goal is not None and goal not in GOALS:
        raise UserError(f"--goal: expected one of {', '.join(GOALS)}, got {goal!r}")
    if baseline_ms is not None and baseline_ms <= 0:
        raise UserError(f"--baseline-ms must be positive, got {baseline_ms}")
    chosen = target or default_target(facts)
    ctx = Context(facts, chosen, goal, train, baseline_ms)
    # A kind without a reference (the fake runtime) gets no advice beyond saying so.
    reference = REFERENCES.get(facts.model_kind)
    rules = RULES if reference is not None and reference.advised else (rule_reference,)
    advice = [a for rule in rules for a in rule(ctx)]
    proposed, excluded = collect(advice, facts.model_kind)
    source = "stated" if target else "detected"
    return AdviceReport(chosen, source, goal, train, facts, advice, proposed, excluded)


def advise(
    ref: str | None,
    target: str | None = None,
    goal: str | None = None,
    train: bool = False,
    baseline_ms: float | None = None,
) -> AdviceReport:
    return advise_facts(facts_for_ref(ref), target, goal, train, baseline_ms)
