"""JAX functions and TensorFlow SavedModels on tiny real models: compile time reported apart
from latency, XLA on and off as two candidates, and no framework imported in the main
process (the runs happen in a child process that reports its own sys.modules)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bakeoff.errors import UserError
from bakeoff.loader import load_workload
from tf_models import SAVEDMODEL
from tiny_jax import jax_workload, write_params

# Both runs in one child process; it prints the run documents and which frameworks
# it imported itself (candidates run in workers, never in this process).
CHILD = textwrap.dedent(
    """
    import json
    import sys

    from bakeoff import api

    docs = {}
    for name in ("jax", "tf"):
        opts = api.RunOptions(quick=True, store=sys.argv[1], budget_s=4)
        docs[name] = api.run(sys.argv[2] + f"/{name}.toml", opts).document
    frameworks = ("jax", "jaxlib", "tensorflow", "keras", "flax", "torch")
    print("RESULT " + json.dumps({
        "docs": docs,
        "imported": [m for m in frameworks if m in sys.modules],
    }))
    """
)


# Slow (make test-slow): 58 s of make test's 12 minutes (two runs, each importing
# JAX or TensorFlow, XLA compiles). make test keeps both frameworks through Keras on
# JAX and TensorFlow (tests/end_to_end/test_keras_litert.py) and the SavedModel
# through OpenVINO (tests/inference/test_gate.py).
@pytest.mark.slow
def test_jax_function_and_savedmodel_with_xla_on_and_off(tmp_path: Path, tf_models: Path) -> None:
    jax_workload(tmp_path)
    # A CPU without native BF16, simulated on every machine: bf16 asked for is still
    # built and measured by XLA (which emulates it), with a note that says so.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "BAKEOFF_CPU_FLAGS": "avx2"}
    (tmp_path / "tf.toml").write_text(
        textwrap.dedent(
            f"""
            name = "tiny-tf"
            [model]
            kind = "savedmodel"
            path = "{tf_models / SAVEDMODEL}"
            [data]
            factory = "tiny_data:inputs"
            [search]
            runtimes = ["tensorflow"]  # OpenVINO on a SavedModel: inference/test_gate.py
            precisions = ["fp32", "int8"]
            batch_sizes = [8]
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "store.db"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(line.removeprefix("RESULT "))
    # No framework in the orchestrating process: jax and tensorflow ran in workers only.
    assert result["imported"] == []

    jax_doc = {c["id"]: c for c in result["docs"]["jax"]["candidates"]}
    for cid in ("jax-fp32-b8", "jax-bf16-b8"):
        c = jax_doc[cid]
        assert c["status"] == "ok", c["reason"]
        # compile time is its own figure, inside the load time, apart from latency
        compile_s = c["cold_start_s"]["compile"]
        assert compile_s == c["settings"]["compile_s"] > 0
        assert compile_s <= c["cold_start_s"]["load"]
        assert c["settings"]["compiled_for"] == [[8, 64]]
        assert c["settings"]["jax_platforms"] == "cpu"
        assert c["latency_ms"]["p50"] > 0
    assert jax_doc["jax-fp32-b8"]["quality"]["drop"] < 1e-5
    assert jax_doc["jax-bf16-b8"]["settings"]["dtype"].startswith("bfloat16")
    assert jax_doc["jax-bf16-b8"]["notes"] == [
        "bf16 is emulated on this CPU (no avx512_bf16/amx_bf16)"
    ]
    assert jax_doc["jax-fp32-b8"]["notes"] == []
    assert result["docs"]["jax"]["environment"]["cpu"]["flags_simulated"] == "avx2"
    # the size is the params as the variant runs them: bf16 halves the fp32 ones
    fp32_mb, bf16_mb = (jax_doc[f"jax-{p}-b8"]["model_size_mb"] for p in ("fp32", "bf16"))
    assert 0 < bf16_mb < fp32_mb and abs(bf16_mb * 2 - fp32_mb) <= 2e-3  # sizes in 0.001 MB
    assert jax_doc["jax-int8-b8"]["status"] == "unavailable"
    assert "quantizer" in jax_doc["jax-int8-b8"]["reason"]
    assert result["docs"]["jax"]["workload"]["reference"] == "jax-fp32"

    tf_doc = {c["id"]: c for c in result["docs"]["tf"]["candidates"]}
    for cid, xla in (("tensorflow-fp32-b8", False), ("tensorflow-fp32-xla-b8", True)):
        c = tf_doc[cid]
        assert c["status"] == "ok", c["reason"]
        assert c["settings"]["jit_compile"] is xla
        assert c["settings"]["intra_op_threads"] >= 1
        assert c["cold_start_s"]["compile"] > 0
        assert c["quality"]["drop"] < 1e-5
    assert tf_doc["tensorflow-int8-b8"]["status"] == "unavailable"


def test_jax_spec_mistakes_name_the_key(tmp_path: Path) -> None:
    wl = jax_workload(tmp_path)
    wl.write_text(wl.read_text().replace('params = "params.npz"', 'params = "params.pkl"'))
    with pytest.raises(UserError, match=r"params = 'params.pkl'.*never a pickle"):
        load_workload(str(wl))
    wl.write_text(wl.read_text().replace('params = "params.pkl"', 'params = "missing.npz"'))
    with pytest.raises(UserError, match=r"model.params = 'missing.npz'.*does not exist"):
        load_workload(str(wl))
    wl.write_text(wl.read_text().replace('"tiny_fn:apply"', '"no_such_module:apply"'))
    with pytest.raises(UserError, match=r"model.function.*no module 'no_such_module'"):
        load_workload(str(wl))
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm.toml").write_text(
        'name = "x"\n[model]\nkind = "savedmodel"\npath = "sm"\n'
        '[data]\nfactory = "tiny_data:inputs"\n'
    )
    with pytest.raises(UserError, match=r"no saved_model\.pb"):
        load_workload(str(tmp_path / "sm.toml"))


def test_jax_params_nest_on_slashes(tmp_path: Path) -> None:
    from bakeoff.backends.jax_backend import read_params

    write_params(tmp_path / "p.npz")
    tree = read_params(str(tmp_path / "p.npz"))
    assert sorted(tree) == ["dense1", "dense2"]
    assert tree["dense1"]["kernel"].shape == (64, 32)
    wl = load_workload(str(jax_workload(tmp_path)))
    assert wl.source.function == "tiny_fn:apply"
    assert wl.source.weights == str(tmp_path / "params.npz")
