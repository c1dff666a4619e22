"""A spec made a `Workload`: the model checked, the data loaded, the source described.

The top of `bakeoff.workload`: it puts the checks and the data together into the
`ModelSource` workers build from (a spec naming a built-in model is merged with
it by `bakeoff.loader`, above this package).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.backends import file_reference_note
from bakeoff.backends.tflite_io import quantize_inputs
from bakeoff.batching import Layout
from bakeoff.errors import UserError
from bakeoff.source import ModelSource, import_factory
from bakeoff.workload.checks import (
    check_hf_folder,
    check_jax_model,
    check_model_path,
    check_weights,
)
from bakeoff.workload.data import check_variable_axes, normalize_data, read_data
from bakeoff.workload.generated import GENERATED_NOTE
from bakeoff.workload.spec import DEFAULT_HF_TASK, ModelSpec, WorkloadSpec


@dataclass(frozen=True)
class Workload:
    """A validated spec plus its data. Samples are on each input's batch axis
    (`source.batch_axes`, else axis 0); `source.constants` have none."""

    spec: WorkloadSpec
    origin: str  # the file path or "builtin:NAME"
    source: ModelSource
    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    # Things the user must know about this workload (e.g. an untrained head);
    # also issued as warnings when the workload is loaded.
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def n_samples(self) -> int:
        return Layout.of(self.source).count(self.inputs)

    @property
    def limits(self) -> dict[str, float]:
        """The [constraints] that are set (key -> limit)."""
        return {k: v for k, v in self.spec.constraints.model_dump().items() if v is not None}


def workload_from_spec(spec: WorkloadSpec, origin: str, base_dir: str | None) -> Workload:
    """A spec of the user's own model, with its data (a spec naming a built-in model
    is merged with it by `bakeoff.loader`)."""
    if spec.model.kind == "builtin":
        raise ValueError("a built-in model's spec is loaded by bakeoff.loader.load_workload")
    assert spec.data is not None
    model_path, weights, hf_config, notes = _check_model(spec.model, base_dir, origin)
    if spec.data.generate is not None:
        notes = [*notes, GENERATED_NOTE]
    raw = read_data(spec.data, model_path, hf_config, base_dir, origin)
    inputs, labels, layout = normalize_data(raw, origin, spec.data.batch_axes, spec.data.constants)
    if spec.model.kind == "tflite" and model_path is not None:
        # A fully integer file takes its inputs quantized: the data is real-valued.
        inputs, said = quantize_inputs(inputs, model_path)
        notes = [*notes, said] if said else notes
    check_variable_axes(spec.data.variable_axes, inputs, layout, origin)
    if spec.quality.metric == "accuracy" and labels is None:
        raise UserError(
            f"{origin}: quality.metric = 'accuracy' needs labels: make data give (inputs, labels)"
            ", put a 'labels' array in the .npz, or name a dataset's labels column "
            '(labels = "label")'
        )
    is_hf = spec.model.kind == "hf"
    source = ModelSource(
        kind=spec.model.kind,
        factory=spec.model.factory,
        path=model_path,
        base_dir=base_dir,
        options=dict(spec.model.options),
        task=(spec.model.task or DEFAULT_HF_TASK) if is_hf else None,
        num_labels=spec.model.num_labels,
        weights=weights,
        weights_key=spec.model.weights_key,
        variable_axes={k: sorted(set(v)) for k, v in spec.data.variable_axes.items()},
        function=spec.model.function,
        batch_axes=dict(layout.batch_axes),
        constants=list(layout.constants),
    )
    for note in notes:
        # Shown once on the terminal; kept in Workload.notes for reports.
        warnings.warn(f"{origin}: {note}", UserWarning, stacklevel=2)
    return Workload(
        spec=spec,
        origin=origin,
        source=source,
        inputs=inputs,
        labels=labels,
        notes=tuple(notes),
    )


def _check_model(
    model: ModelSpec, base_dir: str | None, origin: str
) -> tuple[str | None, str | None, Any, list[str]]:
    """The model's path and weights (or jax params), absolute; an hf folder's config;
    notes for the user. Everything the spec names is checked before any build."""
    model_path = check_model_path(model, base_dir, origin)
    if model.kind == "torch" and model.factory:
        import_factory(model.factory, base_dir, origin, "model.factory")  # fail early
    weights = check_weights(model, base_dir, origin)
    if model.kind == "jax":
        weights = check_jax_model(model, base_dir, origin)
    hf_config: Any = None
    notes: list[str] = []
    if model.kind == "hf":
        assert model_path is not None
        hf_config, notes = check_hf_folder(model, model_path, origin)
    # A .tflite quantized already is its own reference: said before anything runs.
    reference_note = file_reference_note(model.kind, model_path)
    if reference_note:
        notes = [*notes, reference_note]
    return model_path, weights, hf_config, notes
