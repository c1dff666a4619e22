"""One source for each fact: the runtime registry (built-ins plus the `bakeoff.backends`
entry points), the reference runtime per model kind, the CPU-flag table and the GPU probe.

A third-party package is written to a temp folder the way pip would install it (the
package plus a ``*.dist-info`` folder with ``entry_points.txt``): its runtime ``mine``,
a minimal numpy runtime, is listed by `bakeoff env` and measured by `bakeoff run`; two
broken registrations are listed as unavailable with their error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import advise, backends, hardware
from bakeoff.backends import (
    REFERENCES,
    STAND_IN_REFERENCES,
    Availability,
    Variant,
    get_backend,
    reference_choice,
    reference_variant,
    runtime_names,
)
from bakeoff.errors import UserError
from bakeoff.workload import parse_spec
from fake_workload import race_workload as _racing_workload

# A runtime of its own: numpy multiplies the fake model's input by the identity, so its
# outputs equal the fake reference's and the wall clock times it (no virtual clock).
MINE = '''
"""numpy as a bakeoff runtime, for fake models."""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant

RUNTIME = "mine"


def availability() -> Availability:
    return Availability(True, np.__version__)


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind != "fake":
        return [Offer(Variant(RUNTIME, precision), "mine runs fake models only")]
    if precision != "fp32":
        return [Offer(Variant(RUNTIME, precision), f"mine has no {precision}")]
    return [Offer(Variant(RUNTIME, precision))]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}


class NumpyRunner:
    def __init__(self, ctx: LoadContext) -> None:
        self.settings = {"threads": ctx.threads, "numpy": np.__version__}
        self.eye: dict[int, np.ndarray] = {}

    def prepare(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        x = np.asarray(next(iter(batch.values())), dtype=np.float32)
        return x.reshape(len(x), -1)

    def run(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[1]
        if n not in self.eye:
            self.eye[n] = np.eye(n, dtype=np.float32)
        return x @ self.eye[n]

    def to_numpy(self, out: np.ndarray) -> np.ndarray:
        return out


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> NumpyRunner:
    return NumpyRunner(ctx)
'''

# What a package's metadata says (setuptools writes the same from pyproject.toml's
# [project.entry-points."bakeoff.backends"]). `other` is a module whose RUNTIME is another
# name; `fake` cannot take over the built-in.
ENTRY_POINTS = """\
[bakeoff.backends]
mine = mypkg.mine
broken = mypkg.missing
half = mypkg.half
other = mypkg.mine
flaky = mypkg.flaky
fake = mypkg.mine
"""


def _plugin(root: Path) -> Path:
    """The third-party package, installed into `root` (a folder for sys.path)."""
    pkg = root / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mine.py").write_text(MINE)
    # A module with only part of the interface.
    (pkg / "half.py").write_text('RUNTIME = "half"\n\n\ndef availability():\n    return None\n')
    # A whole interface whose availability check itself fails.
    (pkg / "flaky.py").write_text(
        MINE.replace('RUNTIME = "mine"', 'RUNTIME = "flaky"').replace(
            "return Availability(True, np.__version__)", 'raise OSError("no licence server")'
        )
    )
    info = root / "mypkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _workload(folder: Path) -> Path:
    """A fake model measured on the third-party runtime alone."""
    return _racing_workload(folder, '[[candidates]]\nlabel = "numpy"\nruntime = "mine"\n')


def _bakeoff(args: list[str], plugin: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process that finds the package as pip would leave it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


# ---------------------------------------------------------------- the registry


def test_registered_backends_join_the_registry_and_broken_ones_are_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builtins_only = runtime_names()
    assert "mine" not in builtins_only
    monkeypatch.syspath_prepend(str(_plugin(tmp_path / "site")))  # read on every call

    names = runtime_names()
    assert names[: len(builtins_only)] == builtins_only  # the built-ins first, in order
    assert names[len(builtins_only) :] == ("broken", "flaky", "half", "mine", "other")
    assert backends.is_runtime("mine") and not backends.is_runtime("yours")
    assert backends.runtime_origin("mine") == "mypkg.mine from mypkg 0.1"
    assert backends.runtime_origin("fake") == "built-in"  # the entry point `fake` is ignored
    assert get_backend("fake").offers("fp32", "fake")[0].variant == Variant("fake", "fp32")
    with pytest.raises(KeyError):
        get_backend("yours")

    mine = get_backend("mine")
    assert mine.availability().available
    assert [o.variant for o in mine.offers("fp32", "fake")] == [Variant("mine", "fp32")]

    broken = get_backend("broken").availability()
    assert not broken.available
    assert "cannot be loaded: ModuleNotFoundError" in broken.reason, broken.reason
    assert broken.reason.startswith("mypkg.missing cannot be loaded"), broken.reason
    assert broken.install == "fix or uninstall mypkg, whose entry point is broken = mypkg.missing"
    half = get_backend("half")
    assert "is not a backend: it has no offers, build, load" in half.availability().reason
    (offer,) = half.offers("fp32", "fake")
    assert offer.reason and "has no offers" in offer.reason
    with pytest.raises(RuntimeError, match="has no offers"):
        half.load(Variant("half", "fp32"), {}, None)  # type: ignore[arg-type]
    other = get_backend("other").availability()
    assert other.reason == "mypkg.mine says RUNTIME = 'mine', not 'other' as its entry point"
    flaky = get_backend("flaky")
    assert flaky.availability().reason == (
        "mypkg.flaky.availability() raised OSError: no licence server"
    )
    assert flaky.offers("fp32", "fake")[0].reason is None  # the rest of it still answers

    # A workload names it; a misspelling is refused with the registered name as the hint.
    spec = 'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n'
    assert parse_spec(spec + '[search]\nruntimes = ["mine", "fake"]\n', "w.toml")
    with pytest.raises(UserError, match="did you mean 'mine'"):
        parse_spec(spec + '[search]\nruntimes = ["mien"]\n', "w.toml")
    # The advice says why a proposal of a broken one cannot be measured.
    state, why = advise._backend_check("broken", "fp32", "fake")
    assert state == "missing" and "ModuleNotFoundError" in why


def test_bakeoff_env_lists_a_registered_runtime_and_why_broken_ones_cannot_run(
    tmp_path: Path,
) -> None:
    plugin = _plugin(tmp_path / "site")
    proc = _bakeoff(["env", "--json"], plugin, tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {r["runtime"]: r for r in json.loads(proc.stdout)["runtimes"]}
    assert rows["mine"]["available"] and rows["mine"]["version"] == np.__version__
    assert rows["mine"]["origin"] == "mypkg.mine from mypkg 0.1"
    assert rows["fake"]["origin"] == "built-in"
    assert not rows["broken"]["available"] and "ModuleNotFoundError" in rows["broken"]["reason"]
    assert not rows["half"]["available"] and "has no offers" in rows["half"]["reason"]

    shown = _bakeoff(["env"], plugin, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "mine" in shown.stdout and "mypkg.mine" in shown.stdout


def test_bakeoff_run_validates_and_measures_a_registered_runtime(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path / "site")
    wl = _workload(tmp_path)
    out = tmp_path / "result.json"
    store = tmp_path / "store" / "bakeoff.db"
    args = ["run", str(wl), "--quick", "--budget", "2", "--store", str(store), "--json", str(out)]
    proc = _bakeoff(args, plugin, tmp_path)
    assert out.exists(), proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    (cand,) = doc["candidates"]
    assert (cand["runtime"], cand["status"]) == ("mine", "ok"), cand
    assert cand["settings"]["numpy"] == np.__version__  # its own runner ran it
    assert cand["quality"]["value"] == pytest.approx(1.0), cand["quality"]  # vs the reference
    assert cand["latency_ms"]["n"] > 0 and cand["latency_ms"]["p50"] > 0  # by the wall clock
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["verdicts"][0]["winner"] == "numpy-b1"

    # Without the package on the path the same workload is refused by name.
    refused = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "run", str(wl), "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert refused.returncode != 0
    assert "unknown runtime 'mine'" in refused.stdout + refused.stderr


# ---------------------------------------------------------------- one map, one table, one probe


def test_the_reference_per_kind_is_one_map_for_the_run_and_the_advice() -> None:
    from bakeoff.inference import pipeline

    assert pipeline.reference_variant is reference_variant  # what the run's baseline comes from
    for kind, ref in REFERENCES.items():
        own = get_backend(ref.runtime).availability().available
        if own or kind not in STAND_IN_REFERENCES:
            assert Variant(ref.runtime, "fp32") == reference_variant(kind)
        assert ref.runtime in runtime_names(), kind
    assert reference_variant("torch") == reference_variant("some-new-kind")
    facts = advise.facts_for_ref("builtin:minilm")
    for kind, ref in REFERENCES.items():
        f = dataclasses.replace(facts, model_kind=kind)
        (item,) = advise.rule_reference(advise.Context(f, "server-cpu", None, False, None))
        assert item.proposes == ([(ref.runtime, "fp32")] if ref.advised else []), kind


def test_the_cpu_flag_table_is_read_by_the_advice_and_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bakeoff import environment

    shown = set(hardware.NOTABLE_FLAGS)
    assert all(set(flags) <= shown for flags in hardware.NATIVE.values())
    assert advise._INT8_FLAGS is hardware.NATIVE["int8"]  # read, not copied
    assert advise._BF16_FLAGS is hardware.NATIVE["bf16"]
    for flag, path in (("amx_int8", "amx"), ("avx_vnni", "vnni"), ("avx512_vnni", "vnni")):
        monkeypatch.setenv(hardware.FLAGS_VARIABLE, f"avx2,{flag}")
        assert hardware.int8_path() == path
        assert environment.fingerprint()["cpu"]["flags"] == ["avx2", flag]
    monkeypatch.setenv(hardware.FLAGS_VARIABLE, "avx2,avx512f")
    assert hardware.int8_path() == "avx2"


def test_the_gpu_probe_is_one_for_the_advice_the_fingerprint_and_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bakeoff import environment
    from bakeoff.backends import gpu

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0, stdout="NVIDIA L4, 570.86, 23034, 8.9\n")

    monkeypatch.setattr(gpu.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(gpu.subprocess, "run", fake_run)
    gpu.probe.cache_clear()
    try:
        assert advise.detect_gpus() == ((advise.Gpu("NVIDIA L4", 23034),), "nvidia-smi")
        assert environment.fingerprint()["gpu"][0]["name"] == "NVIDIA L4"
        assert gpu.no_cuda_reason() is None

        def failing(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
            raise subprocess.CalledProcessError(9, cmd)

        monkeypatch.setattr(gpu.subprocess, "run", failing)
        gpu.probe.cache_clear()
        gpus, source = advise.detect_gpus()
        assert gpus == () and source.startswith("nvidia-smi failed")
        assert gpu.gpu_info() == [] and gpu.no_cuda_reason() == f"no CUDA device: {source}"
    finally:
        gpu.probe.cache_clear()


def test_a_savedmodel_without_tensorflow_has_openvino_fp32_as_its_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kind's own reference is not installed: OpenVINO, which reads the SavedModel
    itself, stands in at FP32, and the reason names the install command."""
    import bakeoff.backends as backends

    real = backends.get_backend

    class Missing:
        def availability(self) -> Availability:
            return Availability(False, None, "tensorflow-cpu is not installed", "pip install x")

    monkeypatch.setattr(
        backends, "get_backend", lambda r: Missing() if r == "tensorflow" else real(r)
    )
    variant, why = reference_choice("savedmodel")
    assert variant == Variant("openvino", "fp32")
    assert "openvino-fp32" in why and "TensorFlow is not installed here (pip install x)" in why
    assert reference_choice("onnx") == (Variant("onnxruntime", "fp32"), "")  # no stand-in
    monkeypatch.setattr(backends, "get_backend", real)
    if real("tensorflow").availability().available:
        assert reference_choice("savedmodel") == (Variant("tensorflow", "fp32"), "")
