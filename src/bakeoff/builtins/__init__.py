"""Built-in workloads: real models and real data, all offline."""

from __future__ import annotations

from collections.abc import Callable

from bakeoff.errors import UserError
from bakeoff.workload import GenerationWorkload, Workload

BUILTINS = ("minilm", "digits", "digits-keras", "tiny-lm")
GENERATIVE_BUILTINS = ("tiny-lm",)


def load_generation_builtin(
    name: str, say: Callable[[str], None] = lambda _: None
) -> GenerationWorkload:
    """A text-generation built-in (its model trained on first use, `say` telling how)."""
    if name == "tiny-lm":
        from bakeoff.builtins.tiny_lm import workload as tiny_lm_workload

        return tiny_lm_workload(say)
    raise UserError(
        f"builtin:{name}: no such text-generation workload (have: {', '.join(GENERATIVE_BUILTINS)})"
    )


def load_builtin(name: str) -> Workload:
    if name == "minilm":
        from bakeoff.builtins.minilm import workload

        return workload()
    if name == "digits":
        from bakeoff.builtins.digits import workload

        return workload()
    if name == "digits-keras":
        from bakeoff.builtins.digits_keras import workload as keras_workload

        return keras_workload()
    if name in GENERATIVE_BUILTINS:
        raise UserError(
            f"builtin:{name} is a text-generation workload: `bakeoff run builtin:{name}` "
            "measures it; this command does not take generative models yet"
        )
    raise UserError(f"builtin:{name}: no such built-in workload (have: {', '.join(BUILTINS)})")
