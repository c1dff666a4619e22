"""Native TensorRT engines on an NVIDIA GPU: the workload's FP32 ONNX export parsed by
TensorRT's ONNX parser and built into an engine for the run's exact batch shape, FP32 or with
the FP16 builder flag. The engine build happens in `load` and is recorded as
settings["compile_s"], apart from latency. Device buffers are CUDA tensors from PyTorch;
each call is enqueued on a CUDA stream and `run` returns after the stream is synchronized.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant, gpu
from bakeoff.backends import onnxruntime as ort_cpu
from bakeoff.backends.common import check_options
from bakeoff.backends.onnxruntime_cuda import ort_gpu_offers
from bakeoff.batching import read_split

RUNTIME = "tensorrt"
INSTALL = f"pip install tensorrt==11.4.0.106 and {gpu.TORCH_CUDA_INSTALL} (for device buffers)"


def availability() -> Availability:
    return gpu.cuda_availability("tensorrt", "tensorrt", INSTALL, also=gpu.torch_cuda_availability)


def offers(precision: str, model_kind: str) -> list[Offer]:
    return ort_gpu_offers(RUNTIME, precision, model_kind)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    # The engine is specific to the batch shape and the GPU: built in the worker.
    return ort_cpu.build(Variant("onnxruntime", "fp32"), ctx)


class TrtRunner:
    settings = gpu.DEVICE_MEMORY_SETTINGS

    def __init__(
        self, context: Any, stream: Any, inputs: list[str], outputs: dict[str, Any]
    ) -> None:
        self.context, self.stream, self.inputs, self.outputs = context, stream, inputs, outputs
        self._settings: dict[str, Any] = {}
        self.keep: list[Any] = []  # engine and runtime must outlive the context

    def prepare(self, batch: dict[str, np.ndarray]) -> list[Any]:
        import torch

        return [torch.from_numpy(np.asarray(v, order="C")).cuda() for v in batch.values()]

    def run(self, prepared: list[Any]) -> dict[str, Any]:
        for name, tensor in zip(self.inputs, prepared, strict=True):
            self.context.set_tensor_address(name, tensor.data_ptr())
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        self.stream.synchronize()
        return self.outputs

    def to_numpy(self, output: dict[str, Any]) -> np.ndarray:
        first = next(iter(output.values()))
        return first.float().cpu().numpy()

    def named_outputs(self, output: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(n, t.float().cpu().numpy()) for n, t in output.items()]


def _engine(trt: Any, onnx_path: str, shapes: dict[str, tuple[int, ...]], fp16: bool) -> Any:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: the only mode since TensorRT 10
    parser = trt.OnnxParser(network, logger)
    with open(onnx_path, "rb") as f:
        if not parser.parse(f.read()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT's ONNX parser refused {onnx_path}: {errors}")
    config = builder.create_builder_config()
    if fp16:
        if not hasattr(trt.BuilderFlag, "FP16"):
            raise RuntimeError(
                f"TensorRT {trt.__version__} has no FP16 builder flag (strongly typed networks "
                "only): run the float16 ONNX on onnxruntime-cuda instead"
            )
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        name = network.get_input(i).name
        profile.set_shape(name, shapes[name], shapes[name], shapes[name])
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT could not build an engine (see the worker log)")
    runtime = trt.Runtime(logger)
    return runtime, runtime.deserialize_cuda_engine(serialized)


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> TrtRunner:
    import tensorrt as trt
    import torch

    check_options(ctx.options, {"threads"}, RUNTIME)
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA device; install {INSTALL}")
    samples, layout = read_split(ctx.data_path, "pool", ctx.input_names)
    t0 = time.perf_counter()
    import onnx

    graph_inputs = [i.name for i in onnx.load(artifact["path"]).graph.input]
    names = graph_inputs if set(graph_inputs) <= set(samples) else list(samples)
    shapes = {
        g: layout.batch_shape(n, samples[n].shape, ctx.batch_size)
        for g, n in zip(graph_inputs, names, strict=False)
    }
    runtime, engine = _engine(trt, artifact["path"], shapes, variant.precision == "fp16")
    compile_s = time.perf_counter() - t0
    context = engine.create_execution_context()
    inputs, outputs = [], {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            context.set_input_shape(name, shapes[name])
            inputs.append(name)
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            dtype = torch.from_numpy(np.empty(0, trt.nptype(engine.get_tensor_dtype(name)))).dtype
            buf = torch.empty(tuple(context.get_tensor_shape(name)), dtype=dtype, device="cuda")
            context.set_tensor_address(name, buf.data_ptr())
            outputs[name] = buf
    runner = TrtRunner(context, torch.cuda.Stream(), inputs, outputs)
    runner.keep = [runtime, engine]
    runner._settings = {
        "tensorrt_version": trt.__version__,
        "precision_flags": ["FP16"] if variant.precision == "fp16" else [],
        "compile_s": round(compile_s, 6),
        "compiled_for": {k: list(v) for k, v in shapes.items()},
        "gpu": gpu.gpu_info(),
        "sync": "CUDA stream synchronize after every call",
        "exporter": artifact.get("exporter"),
    }
    return runner
