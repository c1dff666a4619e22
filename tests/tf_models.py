"""Tiny real TensorFlow-world models, written once per test session by one child process
(importing TensorFlow costs ~12 s, so it is paid once; the test process itself imports
no framework): `mlp/`, a SavedModel whose serving_default signature takes x [batch, 64];
`heads/`, a SavedModel of three named outputs; and `two_inputs.keras`, a functional
Keras 3 model with inputs feat [batch, 8] (float32) and ids [batch, seq] (int32) into a
50-row Embedding; `one_input.keras`, a functional model of one input, only [batch, 5]
(Keras writes a single input's entry unlike several); `mlp.h5`, a Sequential x [batch,
6] -> 3 in the legacy HDF5 format; `lambda.h5`, a model holding a Python lambda, which
must never be deserialized; and two TFLite files of one Keras model x [1, 12] ->
Dense(16, relu) -> Dense(4), its batch fixed at 1 as TensorFlow's converter fixes it for
a model built with batch_size=1: `float.tflite` (FP32 weights), `int8.tflite`
(full-integer INT8 weights and activations, float input and output) and
`int8_io.tflite` (the same, taking int8 and giving uint8), with
`int8_io_check.npz`: real inputs and the float model's outputs on them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SAVEDMODEL = "mlp"
HEADS_SAVEDMODEL = "heads"  # x [batch, 16] -> onset, note [batch, 6], contour [batch, 9]
HEADS_TFLITE = "heads.tflite"  # the same, through TensorFlow's TFLite converter
KERAS_FILE = "two_inputs.keras"
ONE_INPUT_KERAS_FILE = "one_input.keras"
H5_FILE = "mlp.h5"
LAMBDA_H5_FILE = "lambda.h5"
FLOAT_TFLITE = "float.tflite"
INT8_TFLITE = "int8.tflite"
INT8_IO_TFLITE = "int8_io.tflite"  # int8 in, uint8 out, each with a scale and zero point
INT8_IO_CHECK = "int8_io_check.npz"  # x [8, 12] real inputs and the float model's y
TFLITE_FEATURES = 12  # x [1, 12], the batch fixed at 1 in both files
TFLITE_OUTPUTS = 4

WRITE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import keras
    import numpy as np
    import tensorflow as tf

    out = Path(sys.argv[1])


    class Mlp(tf.Module):
        def __init__(self):
            r = np.random.default_rng(1)
            self.w1 = tf.Variable((r.standard_normal((64, 32)) * 0.1).astype("float32"))
            self.b1 = tf.Variable(np.zeros(32, "float32"))
            self.w2 = tf.Variable((r.standard_normal((32, 10)) * 0.1).astype("float32"))

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2)}


    m = Mlp()
    tf.saved_model.save(m, str(out / "mlp"), signatures={"serving_default": m.serve})


    class Heads(tf.Module):
        # Three named outputs, as a transcription model has: two of one shape, so
        # only their names tell them apart.
        def __init__(self):
            r = np.random.default_rng(2)
            self.w = {k: tf.Variable(r.standard_normal((16, n)).astype("float32"))
                      for k, n in (("onset", 6), ("note", 6), ("contour", 9))}

        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
        def serve(self, x):
            return {k: tf.matmul(x, w) for k, w in self.w.items()}


    h = Heads()
    tf.saved_model.save(h, str(out / "heads"), signatures={"serving_default": h.serve})
    heads_tflite = tf.lite.TFLiteConverter.from_saved_model(str(out / "heads")).convert()
    (out / "heads.tflite").write_bytes(heads_tflite)

    feat = keras.Input((8,), name="feat")
    ids = keras.Input((None,), dtype="int32", name="ids")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4)(ids))
    logits = keras.layers.Dense(3)(keras.layers.Concatenate()([feat, pooled]))
    keras.Model([feat, ids], logits).save(out / "two_inputs.keras")
    only = keras.Input((5,), name="only")
    keras.Model(only, keras.layers.Dense(2)(only)).save(out / "one_input.keras")
    x = keras.Input((6,), name="x")
    layers = [keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)]
    keras.Sequential([x, *layers]).save(out / "mlp.h5")
    keras.Model(x, keras.layers.Lambda(lambda t: t * 2.0)(x)).save(out / "lambda.h5")

    fixed = keras.Input((12,), batch_size=1, name="x")
    hidden = keras.layers.Dense(16, activation="relu")(fixed)
    small = keras.Model(fixed, keras.layers.Dense(4)(hidden))
    (out / "float.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(small).convert())


    def representative():
        r = np.random.default_rng(0)
        for _ in range(32):
            yield [r.standard_normal((1, 12)).astype("float32")]


    converter = tf.lite.TFLiteConverter.from_keras_model(small)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    (out / "int8.tflite").write_bytes(converter.convert())
    # Fully integer, as for a microcontroller: int8 in, uint8 out.
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.uint8
    (out / "int8_io.tflite").write_bytes(converter.convert())
    x = np.random.default_rng(1).standard_normal((8, 12)).astype("float32")
    y = np.concatenate([np.asarray(small(x[i : i + 1])) for i in range(len(x))])
    np.savez(out / "int8_io_check.npz", x=x, y=y)
    """
)


def write_tf_models(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", WRITE, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
