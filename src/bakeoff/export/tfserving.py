"""`bakeoff export --format tfserving`: the candidate as a TensorFlow Serving model,
``DIR/<name>/1/``, a SavedModel with a ``serving_default`` signature.

For a Keras candidate (keras-jax, keras-tensorflow, keras-torch, or tensorflow on a
Keras model) the workload's Keras model, with the weights the run measured and at
the candidate's precision (Keras' bf16 policy, its int8 quantization), is saved
on Keras' TensorFlow backend by Keras' own `ExportArchive`. The signature takes
the workload's inputs by name, with their dtypes and a free batch axis (and free
variable axes), and returns the model's first output as float32 under
``output``. Keras picks its backend once per process, so the SavedModel is
written by a child process (``python -m bakeoff.export.tfserving``) started with
KERAS_BACKEND=tensorflow, which loads it back and checks it against the model
before the export is kept. A TensorFlow candidate on a SavedModel workload is
that SavedModel, copied as measured.

TF Serving takes its threads on its command line, not from the model: the
manifest's ``layout.server_flags`` hold the measured ones.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import read_split
from bakeoff.errors import BakeoffError, UserError

VERSION = "1"
KERAS_RUNTIMES = ("keras-jax", "keras-tensorflow", "keras-torch")
RUNTIMES = (*KERAS_RUNTIMES, "tensorflow")
OUTPUT = "output"
INSTALL = "pip install -e '.[frameworks]'  (or: make frameworks)"
TIMEOUT_S = 600
# The exit code of a child that refuses (bad input, as a UserError), not crashes.
_REFUSED = 2


def refuse_runtime(cand: dict[str, Any]) -> None:
    """A candidate TF Serving cannot serve: refused, naming its runtime."""
    if cand["runtime"] not in RUNTIMES:
        raise UserError(
            f"candidate {cand['id']} runs on {cand['runtime']}: --format tfserving writes a "
            f"TensorFlow SavedModel, for Keras and TensorFlow candidates "
            f"({', '.join(RUNTIMES)}) only; export it with --format triton or the plain "
            "format, or choose a Keras/TensorFlow candidate with --candidate ID"
        )


def savedmodel(
    record: dict[str, Any],
    cand: dict[str, Any],
    source: Any,
    artifact: dict[str, Any],
    data_path: Path,
    input_names: list[str],
    variable_axes: dict[str, list[int]],
    dest: Path,
) -> dict[str, Any]:
    """Write the SavedModel into `dest` (a new folder); return what the manifest says
    of it (signature, exporter, versions)."""
    if source.kind == "savedmodel":
        assert source.path is not None
        shutil.copytree(source.path, dest)
        return {"exporter": "the workload's own SavedModel, copied as measured"}
    missing = [m for m in ("keras", "tensorflow") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"--format tfserving needs {' and '.join(missing)}: {INSTALL}")
    spec = {
        "workload_ref": record["settings"]["workload_ref"],
        "runtime": cand["runtime"],
        "precision": cand["precision"],
        "method": cand["method"],
        "batch_size": int(cand["batch_size"]),
        "weights": artifact.get("weights"),
        "data_path": str(data_path),
        "input_names": input_names,
        "variable_axes": variable_axes,
        # XLA as measured on TensorFlow (keras-tensorflow compiles by default);
        # a model measured on JAX or torch has no TensorFlow setting to keep
        "jit_compile": bool((cand.get("settings") or {}).get("jit_compile")),
        "dest": str(dest),
    }
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run(
        [sys.executable, "-m", "bakeoff.export.tfserving", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if done.returncode == _REFUSED:
        raise UserError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise BakeoffError(
            f"candidate {cand['id']}: writing the SavedModel failed (exit {done.returncode}):\n"
            f"{tail}"
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _write(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child (KERAS_BACKEND=tensorflow): the SavedModel, checked against the model."""
    from bakeoff.keras_models import set_keras_backend

    keras = set_keras_backend("tensorflow")
    import tensorflow as tf

    from bakeoff.backends import LoadContext, Variant
    from bakeoff.backends.keras_common import load_keras
    from bakeoff.keras_models import model_inputs
    from bakeoff.loader import load_workload
    from bakeoff.models import first_output

    source = load_workload(spec["workload_ref"]).source
    names = list(spec["input_names"])
    bs = int(spec["batch_size"])
    examples, layout = read_split(spec["data_path"], "quality", names)
    variant = Variant(spec["runtime"], spec["precision"], spec["method"])
    ctx = LoadContext(source, 1, bs, tuple(names))
    # the model at the candidate's precision, as the keras-* backends load it
    model, _ = load_keras(variant, {"weights": spec["weights"]}, ctx, "tensorflow")

    def call(*args: Any) -> dict[str, Any]:
        out = model(model_inputs(model, dict(zip(names, args, strict=True))), training=False)
        return {OUTPUT: tf.cast(first_output(out), tf.float32)}

    specs = []
    for name, array in examples.items():
        free = {layout.axis(name), *spec["variable_axes"].get(name, [])}
        shape = [None if axis in free else int(d) for axis, d in enumerate(array.shape)]
        specs.append(tf.TensorSpec(shape, tf.as_dtype(array.dtype), name=name))
    call(*(tf.constant(v) for v in layout.cut(examples, 0, bs).values()))  # builds the model
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default", call, input_signature=specs, jit_compile=spec["jit_compile"]
    )
    archive.write_out(spec["dest"], verbose=False)

    # What TF Serving will run: loaded back, at the measured batch size and another.
    signature = tf.saved_model.load(spec["dest"]).signatures["serving_default"]
    rows = layout.count(examples)
    for n in sorted({bs, bs + 1 if rows > bs else max(1, bs - 1)}):
        batch = {k: tf.constant(v) for k, v in layout.cut(examples, 0, n).items()}
        want = call(*batch.values())[OUTPUT].numpy()
        got = signature(**batch)[OUTPUT].numpy()
        if want.shape != got.shape or not np.allclose(want, got, rtol=1e-4, atol=1e-5):
            raise UserError(
                f"the SavedModel's serving_default differs from the Keras model at batch {n} "
                f"(shapes {got.shape} vs {want.shape}); not exported"
            )
    inputs = signature.structured_input_signature[1]
    outputs = signature.structured_outputs
    return {
        "exporter": "keras.export.ExportArchive (TensorFlow backend)",
        "keras_version": keras.__version__,
        "tensorflow_version": tf.__version__,
        "jit_compile": spec["jit_compile"],
        "signature": {
            "name": "serving_default",
            "inputs": {k: _spec_info(v) for k, v in inputs.items()},
            "outputs": {k: _spec_info(v) for k, v in outputs.items()},
        },
    }


def _spec_info(spec: Any) -> dict[str, Any]:
    return {"dtype": spec.dtype.name, "shape": [None if d is None else int(d) for d in spec.shape]}


if __name__ == "__main__":
    try:
        print(json.dumps(_write(json.loads(sys.argv[1]))))
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(_REFUSED)
