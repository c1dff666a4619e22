"""`bakeoff advise`: which stacks to try for this model, on this machine, for this target.

A list of small, explicit rules over what bakeoff can detect cheaply (the model's
kind and family, its parameter count, the CPU's instruction sets, an NVIDIA GPU,
Apple Silicon) and what the user states (the deployment target, the goal,
training). Each rule returns `Advice`: what to try and why, what is out and why.
Nothing here builds or runs a model: it is read from its files (OpenVINO's reader
for an IR, a SavedModel or a TFLite file; torch's weights-only loader for a
state_dict), never compiled or run. After a run, `confirmations` says per piece of
advice whether the measurement confirmed it: advice is a hypothesis, the run is the
test.

The modules, in the order the advice is made: facts.py (what is detected),
parameters.py (the parameter count, from each kind of model file), rules.py (what a
rule reads and returns, and the model's rules), rules_target.py (the deployment
target's), rules_machine.py (the CPU's, the baseline's, training's), report.py (the
rules applied and checked against the backends), confirm.py (the advice against a
run's result document). This face is what the rest of bakeoff and its tests use.
"""

from __future__ import annotations

from bakeoff.advise.confirm import confirmations
from bakeoff.advise.facts import (
    Facts,
    Gpu,
    detect_facts,
    detect_gpus,
    facts_for_ref,
    model_facts,
)
from bakeoff.advise.report import (
    AdviceReport,
    Exclusion,
    Proposal,
    _backend_check,
    advise,
    advise_facts,
    collect,
)
from bakeoff.advise.rules import GOALS, NOT_MEASURED, Advice, Context, rule_reference
from bakeoff.advise.rules_machine import _BF16_FLAGS, _INT8_FLAGS

# The private names are read by tests/backends/test_registry.py: that a proposal of a broken
# plugin says why (_backend_check), and that the flag tables are hardware's own.
__all__ = [
    "GOALS",
    "NOT_MEASURED",
    "_BF16_FLAGS",
    "_INT8_FLAGS",
    "Advice",
    "AdviceReport",
    "Context",
    "Exclusion",
    "Facts",
    "Gpu",
    "Proposal",
    "_backend_check",
    "advise",
    "advise_facts",
    "collect",
    "confirmations",
    "detect_facts",
    "detect_gpus",
    "facts_for_ref",
    "model_facts",
    "rule_reference",
]
