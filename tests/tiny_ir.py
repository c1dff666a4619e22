"""Tiny OpenVINO IR files for the NNCF and OpenVINO tests: an MLP, and the max_drop
that plain NNCF INT8 fails on it on this CPU while one layer back in float meets."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_mlp_ir(tmp_path: Path) -> Path:
    import openvino as ov
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = ov.convert_model(
        net.eval(), example_input=torch.zeros(2, 64), input=[ov.PartialShape([-1, 64])]
    )
    ov.save_model(model, str(tmp_path / "mlp.xml"), compress_to_fp16=False)
    return tmp_path / "mlp.xml"


def plain_int8_drop(xml: Path, calib: dict[str, np.ndarray], out: Path) -> float:
    """What plain NNCF INT8 loses on `calib` on this CPU: 1.5e-3 with VNNI, 8.4e-3
    through AVX2 alone (ONEDNN_MAX_CPU_ISA=AVX2), so gates are set relative to it."""
    from bakeoff.judge.outputs import OutputGate, OutputRule
    from bakeoff.transforms.nncf_quantize import calibration_quality, nncf_int8

    out.mkdir()
    quantized = nncf_int8(str(xml), out, calib, transformer=False)
    gate = OutputGate(OutputRule("cosine", 0.01))
    return calibration_quality(str(xml), quantized["path"], calib, gate).drop


def tight_gate(plain_drop: float) -> float:
    """A max_drop plain INT8 fails and one layer back in float meets, on every CPU
    seen (a third of the plain drop; NNCF reverted one of two layers for it)."""
    return float(f"{plain_drop / 3:.2g}")
