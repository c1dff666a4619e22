"""A fully integer .tflite file (int8 in, uint8 out): its inputs' and outputs'
scales and zero points read by LiteRT and by OpenVINO alike, real-valued data
quantized with them, and both runtimes' outputs dequantized to the real values the
float model gives (raw integers with a zero point would make cosine near 1 whatever
the model computed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff import hardware
from bakeoff.backends import BuildContext, LoadContext, Variant, get_backend
from bakeoff.backends.tflite_io import _from_litert, _from_openvino, quantize_inputs
from bakeoff.loader import load_workload
from bakeoff.source import ModelSource
from tf_models import FLOAT_TFLITE, INT8_IO_CHECK, INT8_IO_TFLITE


def test_litert_and_openvino_read_the_same_scales_and_zero_points(tf_models: Path) -> None:
    path = str(tf_models / INT8_IO_TFLITE)
    (lite_in,), (lite_out,) = _from_litert(path)
    (ov_in,), (ov_out,) = _from_openvino(path)
    assert lite_in is not None and lite_out is not None
    assert (lite_in.dtype, lite_out.dtype) == ("int8", "uint8")
    for lite, ov in ((lite_in, ov_in), (lite_out, ov_out)):
        assert ov is not None and ov.dtype == lite.dtype
        assert ov.zero_point == lite.zero_point
        assert abs(ov.scale - lite.scale) <= 1e-6 * lite.scale
    # a file of float inputs and outputs has nothing quantized at its edges
    float_file = str(tf_models / FLOAT_TFLITE)
    assert _from_litert(float_file) == _from_openvino(float_file) == ((None,), (None,))


def _outputs(runtime: str, path: Path, x: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The runtime's outputs sample by sample (the file's batch is fixed at 1), as
    the quality gate reads them."""
    source = ModelSource("tflite", None, str(path), str(path.parent))
    backend = get_backend(runtime)
    variant = Variant(runtime, "fp32")
    np.savez(tmp_path / "data.npz", **{"calib/x": x})
    build = BuildContext(source, str(tmp_path / runtime), str(tmp_path / "data.npz"), ("x",), 1)
    artifact = backend.build(variant, build)
    runner = backend.load(variant, artifact, LoadContext(source, 1, 1, ("x",)))
    rows = []
    for i in range(len(x)):
        [(_, real)] = runner.named_outputs(runner.run(runner.prepare({"x": x[i : i + 1]})))
        assert np.asarray(real).dtype == np.float32
        rows.append(real)
    return np.concatenate(rows)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)))


def test_real_data_is_quantized_and_the_outputs_dequantized(
    tf_models: Path, tmp_path: Path
) -> None:
    path = tf_models / INT8_IO_TFLITE
    check = np.load(tf_models / INT8_IO_CHECK)
    quantized, note = quantize_inputs({"x": check["x"]}, str(path))
    assert quantized["x"].dtype == np.int8
    assert "quantizes the real-valued data" in note and "1 quantized output(s)" in note
    # data given as integers already is taken as quantized
    again, said = quantize_inputs(quantized, str(path))
    assert again["x"] is quantized["x"] and "integers already" in said
    for runtime in ("litert", "openvino"):
        real = _outputs(runtime, path, quantized["x"], tmp_path)
        # the float Keras model's outputs within INT8's error, where they lie in the
        # range the file's output quantization covers (it was calibrated on other
        # samples); the raw uint8 values would be nowhere near them
        (out,) = _from_litert(str(path))[1]
        assert out is not None
        covered = out.dequantize(np.array([0, 255], np.uint8))
        expected = np.clip(check["y"], covered.min(), covered.max())
        # INT8's error, with the input's rounding carried through two layers: a few
        # hundredths of the range on average, a tenth at most (the weights are drawn
        # anew each session)
        error, span = np.abs(real - expected), float(covered.max() - covered.min())
        mean, most = 0.03, 0.1
        if runtime == "openvino" and hardware.int8_path() not in ("amx", "vnni"):
            # Without VNNI, u8 x s8 pairs are summed in 16 bits (VPMADDUBSW), which
            # can saturate: on an AVX2 EPYC, two sessions' weights were off by 0.025
            # and 0.031 of the range on average, 0.16 at most.
            mean, most = 0.06, 0.25
        assert error.mean() < mean * span and error.max() < most * span, (runtime, error)
        assert _cosine(real, check["y"]) > 0.9, runtime
        assert _cosine(out.quantize(check["y"]).astype(np.float32), check["y"]) < 0.9


def test_a_fully_integer_file_alone_is_a_workload_of_quantized_real_values(
    tf_models: Path,
) -> None:
    """Generated inputs are real values (as for a float input), quantized by the
    file's parameters: not the 0s and 1s an integer index input gets."""
    with pytest.warns(UserWarning, match="quantized inputs"):
        workload = load_workload(str(tf_models / INT8_IO_TFLITE))
    [(_, array)] = workload.inputs.items()
    assert array.dtype == np.int8 and len(np.unique(array)) > 20
    [note] = [n for n in workload.notes if "quantized inputs" in n]
    assert "int8, scale" in note and "1 quantized output(s) are compared dequantized" in note
