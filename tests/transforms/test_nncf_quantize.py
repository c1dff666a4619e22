"""NNCF on tiny real IR files: accuracy-aware INT8 reverting layers until the gate
fits, every output of a model judged (the worst one decides, each output by its own
rule), and recurrent operators left in float. Each test takes seconds to tens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff.judge.outputs import OutputGate, OutputRule
from tiny_ir import plain_int8_drop, tight_gate, write_mlp_ir


def _gate(metric: str, max_drop: float, **more: object) -> OutputGate:
    return OutputGate(OutputRule(metric, max_drop), **more)  # type: ignore[arg-type]


def test_accuracy_aware_int8_reverts_layers_until_the_drop_fits(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    from bakeoff.transforms import StepFailed
    from bakeoff.transforms.nncf_quantize import nncf_int8_accuracy_aware

    xml = write_mlp_ir(tmp_path)
    calib = {"x": (load_digits().data[:32] / 16.0).astype(np.float32)}
    # A third of plain INT8's drop on this CPU needs a layer back in float. With
    # model_type transformer this also guards against SmoothQuant's rescaling
    # left behind by NNCF's revert (it made the model drift from FP32).
    tight = tight_gate(plain_int8_drop(xml, calib, tmp_path / "plain"))
    for transformer in (False, True):
        out = tmp_path / f"aa-{transformer}"
        out.mkdir()
        q = nncf_int8_accuracy_aware(str(xml), out, calib, transformer, _gate("cosine", tight))
        settings = q["quantization"]
        assert settings["reverted_to_float"], settings
        assert settings["quantized_operations"] == 2
        assert settings["fake_quantize_ops"] > 0
        assert settings["calibration_drop"] <= tight, settings
        assert (out / "model.xml").exists()
    # A max_drop only FP32 meets: every quantizer reverted is a failure, not an
    # FP32 model measured under an INT8 label.
    out = tmp_path / "aa-zero"
    out.mkdir()
    try:
        nncf_int8_accuracy_aware(str(xml), out, calib, False, _gate("max_abs", 0.0))
    except StepFailed as exc:
        assert "reverted every quantizer to float" in str(exc)
    else:
        raise AssertionError("an INT8 build with no quantizer left must fail")


class _Encoder:
    """A tiny speaker-encoder-like LSTM, as Resemblyzer's: LSTM -> Linear -> ReLU."""

    @staticmethod
    def ir(tmp_path: Path) -> Path:
        import openvino as ov
        import torch

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = torch.nn.LSTM(8, 16, 2, batch_first=True)
                self.linear = torch.nn.Linear(16, 16)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                _, (hidden, _) = self.lstm(x)
                return torch.relu(self.linear(hidden[-1]))

        torch.manual_seed(0)
        model = ov.convert_model(
            Encoder().eval(),
            example_input=torch.zeros(2, 12, 8),
            input=[ov.PartialShape([-1, 12, 8])],
        )
        ov.save_model(model, str(tmp_path / "lstm.xml"), compress_to_fp16=False)
        return tmp_path / "lstm.xml"


@pytest.mark.parametrize("accuracy_aware", [False, True])
def test_nncf_int8_leaves_recurrent_operators_in_float_and_says_so(
    tmp_path: Path, accuracy_aware: bool
) -> None:
    import openvino as ov

    from bakeoff.transforms.nncf_quantize import nncf_int8, nncf_int8_accuracy_aware

    xml = _Encoder.ir(tmp_path)
    calib = {"x": np.random.default_rng(0).random((16, 12, 8), np.float32)}
    out = tmp_path / "int8"
    out.mkdir()
    if accuracy_aware:
        built = nncf_int8_accuracy_aware(str(xml), out, calib, False, _gate("cosine", 0.01))
    else:
        built = nncf_int8(str(xml), out, calib, transformer=False)
    assert built["quantization"]["left_in_float"] == ["LSTMSequence"]
    model = ov.Core().read_model(built["path"])
    assert not any(
        _reaches_lstm(op) for op in model.get_ops() if op.get_type_name() == "FakeQuantize"
    )
    assert any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())  # INT8 still


# Operations that only reshape or retype a tensor on its way to another.
_PASSING = {"Squeeze", "Unsqueeze", "Reshape", "Transpose", "Convert"}


def _reaches_lstm(op: object) -> bool:
    """Whether `op`'s output feeds an LSTMSequence, directly or through reshapes."""
    for out in op.outputs():  # type: ignore[attr-defined]
        for target in out.get_target_inputs():
            node = target.get_node()
            kind = node.get_type_name()
            if kind == "LSTMSequence" or (kind in _PASSING and _reaches_lstm(node)):
                return True
    return False


def _two_heads_ir(tmp_path: Path) -> Path:
    """One input, two named outputs: `stable`, a linear head INT8 barely moves, and
    `fragile`, a sine of 300·h that INT8's rounding of h scrambles."""
    import openvino as ov
    import torch

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stable, self.fragile = mlp(), mlp()

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.stable(x), torch.sin(300 * self.fragile(x))

    torch.manual_seed(0)
    model = ov.convert_model(
        Heads().eval(), example_input=torch.zeros(2, 16), input=[ov.PartialShape([-1, 16])]
    )
    for port, name in zip(model.outputs, ("stable", "fragile"), strict=True):
        port.get_tensor().set_names({name})
    ov.save_model(model, str(tmp_path / "heads.xml"), compress_to_fp16=False)
    return tmp_path / "heads.xml"


def test_every_output_is_judged_on_the_calibration_split(tmp_path: Path) -> None:
    """Whether the accuracy-aware variant is needed, and what NNCF tunes to: the
    worst output decides (the first alone had passed here), `[quality] outputs`
    restricts the outputs and `[quality.per_output]` gives one its own rule."""
    from bakeoff.transforms.nncf_quantize import calibration_quality, nncf_int8

    xml = _two_heads_ir(tmp_path)
    calib = {"x": np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)}
    (tmp_path / "int8").mkdir()
    plain = nncf_int8(str(xml), tmp_path / "int8", calib, transformer=False)["path"]

    q = calibration_quality(str(xml), plain, calib, _gate("cosine", 0.05))
    figures = {o.output: o.drop for o in q.outputs}
    assert (q.output, q.passed) == ("fragile", False), figures
    assert figures["stable"] <= 0.05 < figures["fragile"]
    only_stable = _gate("cosine", 0.05, only=("stable",))
    assert calibration_quality(str(xml), plain, calib, only_stable).passed
    loose = _gate("cosine", 0.05, per_output={"fragile": OutputRule("cosine", 2.0)})
    assert calibration_quality(str(xml), plain, calib, loose).passed


def test_accuracy_control_tunes_to_the_worst_output(tmp_path: Path) -> None:
    from bakeoff.transforms.nncf_quantize import nncf_int8_accuracy_aware

    xml = _two_heads_ir(tmp_path)
    calib = {"x": np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)}
    (tmp_path / "aa").mkdir()
    built = nncf_int8_accuracy_aware(str(xml), tmp_path / "aa", calib, False, _gate("cosine", 0.05))
    settings = built["quantization"]
    assert settings["reverted_to_float"], settings
    assert set(settings["calibration_outputs"]) == {"stable", "fragile"}
    assert max(settings["calibration_outputs"].values()) <= 0.05, settings
    assert settings["calibration_drop"] == max(settings["calibration_outputs"].values())
