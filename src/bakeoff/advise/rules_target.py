"""The deployment target's rules: general -> ONNX Runtime; maximum NVIDIA performance
-> TensorRT; Intel edge -> OpenVINO; mobile -> LiteRT; Apple -> MLX / Core ML; and,
where the target is not this machine, that the timings are this machine's.
"""

from __future__ import annotations

from collections.abc import Callable

from bakeoff.advise.rules import NOT_MEASURED, Advice, Context, no_gpu_reason

# NVIDIA runtimes (docs/method.md §6 names) and what each is, in the order they are
# proposed. Not derived from the backends registry: it does not mark which runtimes
# need an NVIDIA GPU, and jax-cuda, which does, is JAX's own advice (rule_jax).
_NVIDIA_RUNTIMES = {
    "tensorrt": "TensorRT",
    "onnxruntime-tensorrt": "ONNX Runtime with the TensorRT execution provider",
    "onnxruntime-cuda": "ONNX Runtime with the CUDA execution provider",
    "torch-cuda": "PyTorch on CUDA",
    "torch-compile-cuda": "torch.compile on CUDA",
}


def rule_target(ctx: Context) -> list[Advice]:
    """Deployment by target: one function per target below, each giving its advice in
    the order it is shown. ONNX Runtime and OpenVINO are proposed for every model
    kind: the backends' offers say which kinds they can export or convert, and
    exclude the rest with why."""
    for_target = _BY_TARGET.get(ctx.target)
    return for_target(ctx) if for_target else []


def _server_cpu(ctx: Context) -> list[Advice]:
    return [_onnxruntime_general(), _openvino_advice("server-cpu", ctx.facts.cpu_vendor)]


def _server_gpu(ctx: Context) -> list[Advice]:
    no_gpu = no_gpu_reason(ctx)
    kind = ctx.facts.model_kind
    nvidia = [r for r in _NVIDIA_RUNTIMES if kind in ("torch", "hf") or "torch" not in r]
    out = [
        _onnxruntime_general(),
        Advice(
            "nvidia",
            "TensorRT for maximum NVIDIA performance; CUDA providers for the rest",
            "an NVIDIA GPU server: TensorRT builds engines tuned for the exact GPU",
            proposes=[] if no_gpu else [(r, "fp16") for r in nvidia],
            excludes=[(r, no_gpu) for r in nvidia] if no_gpu else [],
            confirm="wins",
        ),
    ]
    if no_gpu:
        out.append(
            Advice(
                "measured-here",
                "the target is server-gpu, but this machine has no NVIDIA GPU: only CPU "
                "candidates can be measured here; run bakeoff on the GPU server",
                no_gpu,
                warning=True,
            )
        )
    return out


def _edge_intel(ctx: Context) -> list[Advice]:
    return [
        _onnxruntime_general(),
        _openvino_advice("edge-intel", ctx.facts.cpu_vendor),
        _measured_elsewhere("edge-intel"),
    ]


def _mobile(ctx: Context) -> list[Advice]:
    return [
        _measured_elsewhere("mobile"),
        Advice(
            "mobile",
            "LiteRT on the phone (PyTorch models convert with ai-edge-torch; "
            f"ExecuTorch is PyTorch's own route; {NOT_MEASURED} for PyTorch models)",
            "mobile: LiteRT runs on Android and iOS with GPU/NPU delegates",
            excludes=[("openvino", "OpenVINO does not target phones")]
            + [(r, "no NVIDIA GPU on a phone") for r in ("tensorrt", "onnxruntime-cuda")],
        ),
        Advice(
            "onnxruntime-mobile",
            "ONNX Runtime INT8 (the same graph ONNX Runtime Mobile runs)",
            "mobile: ONNX Runtime Mobile takes the exported, quantized graph",
            proposes=[("onnxruntime", "fp32"), ("onnxruntime", "int8")],
            confirm="runtime-wins",
        ),
    ]


def _browser(ctx: Context) -> list[Advice]:
    return [
        _measured_elsewhere("browser"),
        Advice(
            "browser",
            f"ONNX Runtime Web or LiteRT.js (WebGPU/WASM) ({NOT_MEASURED}); the native "
            "ONNX Runtime candidates show how the exported graph and its quantization fare",
            "browser: both run the exported graph client-side",
            proposes=[("onnxruntime", "fp32"), ("onnxruntime", "int8")],
            excludes=[("tensorrt", "a browser has no TensorRT")],
            confirm="runtime-wins",
        ),
    ]


def _apple(ctx: Context) -> list[Advice]:
    # On Apple Silicon the timings are the target's own; elsewhere they are not.
    out = [] if ctx.facts.apple_silicon else [_measured_elsewhere("apple")]
    out.append(
        Advice(
            "apple",
            f"MLX or Core ML on Apple Silicon ({NOT_MEASURED})",
            "Apple: Core ML reaches the Neural Engine; MLX uses the unified memory GPU",
            excludes=[
                ("tensorrt", "no NVIDIA GPU on Apple Silicon"),
                ("openvino", "OpenVINO is built for Intel hardware, not Apple Silicon"),
            ],
        )
    )
    return out


_BY_TARGET: dict[str, Callable[[Context], list[Advice]]] = {
    "server-cpu": _server_cpu,
    "server-gpu": _server_gpu,
    "edge-intel": _edge_intel,
    "mobile": _mobile,
    "browser": _browser,
    "apple": _apple,
}


def _onnxruntime_general() -> Advice:
    return Advice(
        "onnxruntime-general",
        "ONNX Runtime: the general deployment choice",
        "one exported file runs on every OS and accelerator through execution providers",
        proposes=[("onnxruntime", "fp32")],
        confirm="runtime-wins",
    )


def _measured_elsewhere(target: str) -> Advice:
    """A stated target that is another device: the timings rank, they do not predict."""
    return Advice(
        "measured-here",
        f"timings are from this machine, not from a {target} device: they rank the "
        "candidates, the device's own figures will differ; run bakeoff there to be sure",
        f"the target {target} was stated; bakeoff measures where it runs",
        warning=True,
    )


def _openvino_advice(target: str, vendor: str) -> Advice:
    """OpenVINO is Intel's toolkit; its CPU plugin (oneDNN underneath) runs on any
    x86-64 CPU with AVX2. The words name the CPU this is: on AMD it is a candidate
    like any other, not a runtime built for this machine."""
    if target == "edge-intel":
        text, why = (
            "OpenVINO for the Intel edge device",
            "the target edge-intel was stated: OpenVINO is Intel's runtime for their CPUs, "
            "GPUs and NPUs",
        )
    elif vendor == "Intel":
        text, why = (
            "OpenVINO on this Intel CPU",
            "an Intel server CPU: OpenVINO's CPU plugin is Intel's own, tuned for their "
            "instruction sets",
        )
    else:
        cpu = f"{vendor} CPU" if vendor != "unknown" else "CPU (vendor unknown)"
        text, why = (
            f"OpenVINO as a candidate on this {cpu}",
            f"OpenVINO's CPU plugin runs on any x86-64 CPU with AVX2 but is tuned first for "
            f"Intel's; on this {cpu} whether it pays is unproven, so it is measured",
        )
    return Advice(
        f"openvino-{target}", text, why, proposes=[("openvino", "fp32")], confirm="runtime-wins"
    )
