"""Built-in workloads: real models and real data, all offline."""

from __future__ import annotations

from bakeoff.errors import UserError
from bakeoff.workload import Workload

BUILTINS = ("minilm", "digits", "digits-keras")


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
    raise UserError(f"builtin:{name}: no such built-in workload (have: {', '.join(BUILTINS)})")
