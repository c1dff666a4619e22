"""`bakeoff export`: a measured candidate's artifact, ready to deploy, and `load` to run it.

An export folder holds the model file(s) exactly as measured and
``manifest.json``: what the candidate is (runtime, version, precision,
method), how it was run (the runtime settings it was measured with, threads),
its inputs, its measured quality and speed, the sha256 of every file, and
the run it came from. What is written per runtime:

- ``onnxruntime``: ``model.onnx`` (with its external-data files, if any).
- ``openvino``: ``model.xml`` + ``model.bin`` (the IR; FP16/BF16 variants are
  the FP32 IR run with an inference precision hint, which the manifest keeps).
- ``torch`` / ``torch-compile``: ``model.pt2``, a `torch.export` program of
  the model as it was measured (BF16/FP16 autocast and INT4 weight-only layers
  included), with a dynamic batch axis, saved with `torch.export.save`; it
  loads with `torch.export.load` and needs neither bakeoff nor the model's
  code. torch-compile is compiled again on load with the measured mode.
  PyTorch dynamic INT8 cannot be saved this way (its packed Linear weights are
  not exportable) and is refused with that reason.
- ``litert``: ``model.tflite``, the converted flatbuffer as measured (INT8
  included), with a dynamic batch axis; `load` runs it on LiteRT's interpreter
  with the measured thread count.

`load(DIR)` reads the manifest, checks every file's sha256, imports only the
runtime the manifest names, and returns a callable ``predict(inputs)``. Nothing
heavy is imported at the top of this package, so a deployment needs bakeoff's
numpy dependency and the one runtime, nothing else.

The parts: `writer` (choosing the candidate, copying its files, the manifest),
`program` (the torch.export program of a torch candidate), `manifest` (the manifest
read back and checked, key by key, and the files against their sha256) and `predictor`
(the checked manifest made a `Predictor`, each runtime set up by its backend's own
session, compile and interpreter functions).
"""

from bakeoff.export.predictor import FORMAT, MANIFEST, Predictor, load, manifest_layout
from bakeoff.export.writer import EXPORTABLE, export, variant_measurements

__all__ = [
    "EXPORTABLE",
    "FORMAT",
    "MANIFEST",
    "Predictor",
    "export",
    "load",
    "manifest_layout",
    "variant_measurements",
]
