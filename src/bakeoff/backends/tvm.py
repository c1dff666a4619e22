"""Apache TVM (Relax) on the CPU: the workload's FP32 ONNX export, imported with TVM's Relax
ONNX frontend and compiled for LLVM on this CPU, run on the Relax virtual machine.

Compilation happens in `load` for the run's exact batch shape (static shapes let TVM
specialise every loop); its time is settings["compile_s"], apart from latency. No
MetaSchedule tuning is run: the kernels are TVM's default schedules, as a user gets them
without hours of tuning. Tested with apache-tvm 0.27.0.post1 (its Target takes JSON-style
dicts; the "llvm -mcpu=..." string form is refused).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options, example_inputs, package_availability
from bakeoff.batching import read_split
from bakeoff.tensors import map_inputs

RUNTIME = "tvm"
# TVM compiles for the batch shape in `load`.
COMPILES_WHEN_LOADED = True
INSTALL = "pip install apache-tvm==0.27.0.post1"
OPTIONS = {"threads"}


def availability() -> Availability:
    return package_availability("apache-tvm", "tvm", INSTALL)


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in ("torch", "hf", "onnx"):
        return [Offer(Variant(RUNTIME, precision), f"the model is {model_kind}, not ONNX-able")]
    if precision == "fp32":
        return [Offer(Variant(RUNTIME, "fp32"))]
    return [
        Offer(
            Variant(RUNTIME, precision),
            f"{precision} is not built by this version: TVM's Relax ONNX path has no "
            "post-training quantizer; see the onnxruntime and openvino candidates",
        )
    ]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    from bakeoff.transforms.onnx_export import ensure_onnx

    return dict(ensure_onnx(ctx.source, ctx.artifacts_dir, example_inputs(ctx)))


ONNX_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


class TvmRunner:
    def __init__(self, compile_for: Any, inputs: list[tuple[str, Any]], dev: Any) -> None:
        self.compile_for, self.inputs, self.dev = compile_for, inputs, dev
        self.vms: dict[tuple[tuple[int, ...], ...], Any] = {}
        self.settings: dict[str, Any] = {}

    def prepare(self, batch: dict[str, np.ndarray]) -> tuple[Any, tuple[Any, ...]]:
        import tvm

        arrays = list(map_inputs(batch, self.inputs).values())
        key = tuple(a.shape for a in arrays)
        if key not in self.vms:
            # Another shape than the run's (the quality check at a second shape).
            self.vms[key] = self.compile_for(key)
        return self.vms[key], tuple(tvm.runtime.tensor(a, self.dev) for a in arrays)

    def run(self, prepared: tuple[Any, tuple[Any, ...]]) -> Any:
        vm, args = prepared
        return vm["main"](*args)  # the CPU VM returns when the result is computed

    def to_numpy(self, output: Any) -> np.ndarray:
        first = output if hasattr(output, "numpy") else output[0]
        return np.asarray(first.numpy(), dtype=np.float32)

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        from bakeoff.tensors import sequence_output_name

        every = [output] if hasattr(output, "numpy") else list(output)
        return [(sequence_output_name(i), o.numpy()) for i, o in enumerate(every)]


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> TvmRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    # TVM's thread pool reads this once, when the runtime starts.
    os.environ["TVM_NUM_THREADS"] = str(ctx.threads)
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.target import codegen

    model = onnx.load(artifact["path"])
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    inputs = [(i.name, ONNX_TYPES.get(i.type.tensor_type.elem_type)) for i in graph_inputs]
    cpu = codegen.llvm_get_system_cpu()
    target = tvm.target.Target(
        {
            "kind": "llvm",
            "mtriple": codegen.llvm_get_system_triple(),
            "mcpu": cpu,
            "num-cores": ctx.threads,
        }
    )
    dev = tvm.cpu()

    def compile_for(shapes: tuple[tuple[int, ...], ...]) -> Any:
        shape_dict = {name: list(s) for (name, _), s in zip(inputs, shapes, strict=True)}
        dtype_dict = {name: np.dtype(t or np.float32).name for name, t in inputs}
        mod = from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict)
        return relax.VirtualMachine(tvm.compile(mod, target=target), dev)

    runner = TvmRunner(compile_for, inputs, dev)
    settings: dict[str, Any] = {
        "tvm_version": tvm.__version__,
        "target": str(target),
        "llvm_cpu": cpu,
        "threads": ctx.threads,
        "tuning": "none (default schedules, no MetaSchedule)",
        "exporter": artifact.get("exporter"),
    }
    if ctx.data_path:
        pool, layout = read_split(ctx.data_path, "pool", ctx.input_names)
        shapes = tuple(layout.batch_shape(n, a.shape, ctx.batch_size) for n, a in pool.items())
        t0 = time.perf_counter()
        runner.vms[shapes] = compile_for(shapes)
        settings["compile_s"] = round(time.perf_counter() - t0, 6)
        settings["compiled_for"] = [list(s) for s in shapes]
    runner.settings = settings
    return runner
