"""What the three Keras 3 runtimes (keras-jax, keras-tensorflow, keras-torch) share.

Each runs the workload's Keras model natively on one Keras backend, in a worker
that sets KERAS_BACKEND before keras is imported (see bakeoff.keras_models).

Precisions: FP32; BF16 through Keras' ``mixed_bfloat16`` dtype policy (bf16
compute, float32 variables), where the CPU has native BF16; INT8 through Keras'
own ``model.quantize("int8")`` (int8 weights per output channel, activations
quantized per call: Dense, EinsumDense and Embedding layers; other layers stay
float). FP16 (``mixed_float16``) is offered as unavailable: it is a GPU policy,
and the CPU backends compute float16 by emulation.

The timed call is the model's forward under the backend's own compilation
(jax.jit of ``stateless_call``, tf.function), not ``model.predict``: predict
builds a data pipeline per call and costs about a millisecond more per batch
than the model itself on a small network (measured: 1.2 ms vs 0.04 ms on JAX).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import package_availability
from bakeoff.hardware import emulation_note

INSTALL = "pip install -e '.[frameworks]'  (or: make frameworks)"
FP16_REASON = (
    "Keras' mixed_float16 policy is for GPUs; on the CPU the {backend} backend emulates "
    "float16 arithmetic, so it is not built (bf16 uses native CPU instructions)"
)


def keras_availability(dist: str, module: str) -> Availability:
    keras = package_availability("keras", "keras", INSTALL)
    if not keras.available:
        return keras
    backend = package_availability(dist, module, INSTALL)
    if not backend.available:
        return backend
    return Availability(True, f"keras {keras.version}, {dist} {backend.version}")


def keras_offers(runtime: str, backend: str, precision: str, model_kind: str) -> list[Offer]:
    if model_kind != "keras":
        return [Offer(Variant(runtime, precision), f"the model is {model_kind}, not Keras")]
    if precision == "fp32":
        return [Offer(Variant(runtime, "fp32"))]
    if precision == "bf16":
        return [Offer(Variant(runtime, "bf16", "mixed"), note=emulation_note("bf16"))]
    if precision == "int8":
        return [Offer(Variant(runtime, "int8", "dynamic"), note=emulation_note("int8"))]
    if precision == "fp16":
        return [Offer(Variant(runtime, "fp16"), FP16_REASON.format(backend=backend))]
    return [
        Offer(
            Variant(runtime, precision),
            f"{precision} is not built for Keras models by this version (Keras' int4 "
            "quantization is weight-only for GPUs)",
        )
    ]


def keras_build(variant: Variant, ctx: BuildContext, backend: str) -> dict[str, Any]:
    """Nothing to convert: the worker loads the model itself. A factory model's
    weights are saved once, so every Keras backend runs the same numbers."""
    from bakeoff.transforms.keras_export import keras_weights

    weights = keras_weights(ctx.source, ctx.artifacts_dir, backend)
    if weights is not None:
        return {"path": weights, "weights": weights}
    return {"path": ctx.source.path}  # the user's .keras file: its size is what ships


@dataclass(frozen=True)
class KerasOnBackend:
    """What a Keras backend's runtime module offers the registry (`availability`,
    `offers`, `build`), the same for the three backends but for the names; each
    module binds them at its top and writes its own `load`."""

    runtime: str
    backend: str
    dist: str  # the backend's package, and the module it imports
    module: str

    def availability(self) -> Availability:
        return keras_availability(self.dist, self.module)

    def offers(self, precision: str, model_kind: str) -> list[Offer]:
        return keras_offers(self.runtime, self.backend, precision, model_kind)

    def build(self, variant: Variant, ctx: BuildContext) -> dict[str, Any]:
        return keras_build(variant, ctx, self.backend)


def load_keras(
    variant: Variant, artifact: dict[str, Any], ctx: LoadContext, backend: str
) -> tuple[Any, dict[str, Any]]:
    """The model on `backend` at the variant's precision, and the settings applied."""
    from bakeoff.keras_models import BF16_POLICY, load_keras_model, set_keras_backend

    keras = set_keras_backend(backend)
    model = load_keras_model(ctx.source, backend, artifact.get("weights"))
    settings: dict[str, Any] = {
        "keras_backend": keras.backend.backend(),
        "keras_version": keras.__version__,
    }
    if variant.precision == "bf16":
        from bakeoff.keras_models import with_policy

        model = with_policy(model, BF16_POLICY)
    if variant.precision == "int8":
        model.quantize("int8")
        settings["quantization"] = {
            "method": "dynamic",
            "api": 'keras Model.quantize("int8")',
            "weights": "int8, per output channel (abs-max)",
            "activations": "int8, quantized per call (abs-max)",
            "layers": sorted(
                {
                    type(la).__name__
                    for la in _layers(model)
                    if getattr(la, "quantization_mode", None)
                }
            ),
        }
    policies = sorted({la.dtype_policy.name for la in _layers(model) if _has_weights(la)})
    settings["dtype_policy"] = policies[0] if len(policies) == 1 else policies
    return model, settings


# Bytes per element of the dtypes a Keras variable can hold here.
_ITEMSIZE = {"float64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


def keras_weight_bytes(model: Any) -> int:
    """The model's variables as they sit in memory: after Model.quantize("int8") the
    kernels are int8 (plus float32 scales), while the file loaded is still FP32."""
    import math

    return sum(math.prod(v.shape) * _ITEMSIZE.get(str(v.dtype), 4) for v in model.weights)


def _layers(model: Any) -> list[Any]:
    return list(model._flatten_layers(include_self=False, recursive=True))


def _has_weights(layer: Any) -> bool:
    return bool(getattr(layer, "weights", None))


class KerasRunner:
    """Runs `call` on prepared inputs; `call` returns only when the result is complete."""

    def __init__(
        self,
        model: Any,
        settings: dict[str, Any],
        prepare: Callable[[Any], Any],
        call: Callable[[Any], Any],
    ) -> None:
        self.model = model
        self.settings = settings
        self._prepare = prepare
        self._call = call
        # Quantized at load, so the file's size is not what runs: report the weights.
        if "quantization" in settings:
            self.model_bytes = keras_weight_bytes(model)

    def prepare(self, batch: dict[str, Any]) -> Any:
        from bakeoff.keras_models import model_inputs

        return model_inputs(self.model, {k: self._prepare(v) for k, v in batch.items()})

    def run(self, prepared: Any) -> Any:
        return self._call(prepared)

    def to_numpy(self, output: Any) -> Any:
        import keras
        import numpy as np

        if isinstance(output, dict):
            output = next(iter(output.values()))
        elif isinstance(output, list | tuple):
            output = output[0]
        return np.asarray(keras.ops.convert_to_numpy(output), dtype=np.float32)

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        """A list's outputs by the model's own output names (as its SavedModel and
        TFLite exports name them), a dict's by its keys."""
        import keras

        from bakeoff.tensors import named_outputs

        found = named_outputs(output)
        own = list(getattr(self.model, "output_names", None) or [])
        if isinstance(output, list | tuple) and len(own) == len(found):
            found = [(name, t) for name, (_, t) in zip(own, found, strict=True)]
        return [(n, keras.ops.convert_to_numpy(t)) for n, t in found]
