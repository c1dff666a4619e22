"""Workload spec validation: every mistake is a UserError naming the file and the key."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bakeoff.errors import UserError
from bakeoff.loader import load_workload
from bakeoff.workload import parse_spec
from bakeoff.workload.spec import default_runtimes

FAKE_MODEL = '[model]\nkind = "fake"\n'


def _unique(prefix: str) -> str:
    """A module name no other test (or earlier import) has put in sys.modules."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _restore_sys_path() -> Iterator[None]:
    before = list(sys.path)
    yield
    assert sys.path == before, "load_workload must not leave entries on sys.path"


def _write(tmp_path: Path, body: str, data: bool = True) -> Path:
    if data:
        np.savez(tmp_path / "d.npz", input=np.zeros((8, 3), dtype=np.float32))
    path = tmp_path / "w.toml"
    path.write_text(textwrap.dedent(body))
    return path


def _load_error(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_workload(str(path))
    return str(info.value)


# ---------------------------------------------------------------- unknown keys


def test_misspelled_search_key_names_file_key_and_hint(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [search]
        runtime = ["fake"]
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "search.runtime" in msg
    assert "did you mean 'runtimes'?" in msg


def test_misspelled_quality_key_names_file_key_and_hint(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [quality]
        metrc = "cosine"
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "quality.metrc" in msg
    assert "did you mean 'metric'?" in msg
    # the valid keys are listed so the user can fix it without reading the docs
    assert "max_drop" in msg


def test_unknown_top_level_key_is_reported(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        nmae = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        """,
    )
    msg = _load_error(path)
    assert "nmae" in msg
    assert "did you mean 'name'?" in msg
    assert "name: required key is missing" in msg


# Every table of a workload file, each with one key misspelled: the answer names the
# key, suggests the right one and lists the keys allowed in that table (for [model],
# those of its kind; for [data], those that go with its source).
_MODEL_TABLES = {
    "torch": ('factory = "m:build"\nweigths = "w.safetensors"', "weights"),
    "hf": ('path = "folder"\ntsk = "feature-extraction"', "task"),
    "onnx": ('pth = "model.onnx"', "path"),
    "openvino": ('path = "model.xml"\nptah = "model.xml"', "path"),
    "keras": ('factory = "m:build"\nfactroy = "m:build"', "factory"),
    "jax": ('function = "m:apply"\nparmas = "p.npz"', "params"),
    "savedmodel": ('paht = "saved"', "path"),
    "tflite": ('path = "m.tflite"\npaht = "m.tflite"', "path"),
    "builtin": ('nme = "digits"', "name"),
    "fake": ("optoins = { latency_ms = 1.0 }", "options"),
}


def _unknown_key_answer(text: str) -> tuple[str, list[str]]:
    """The error for a workload with one unknown key, and the keys it lists as allowed."""
    with pytest.raises(UserError) as err:
        parse_spec(text, "w.toml")
    msg = str(err.value)
    return msg, msg.split("(expected one of: ", 1)[1].split(")", 1)[0].split(", ")


@pytest.mark.parametrize("kind", list(_MODEL_TABLES))
def test_misspelled_model_key_of_each_kind_gets_a_hint_and_its_kinds_keys(kind: str) -> None:
    body, meant = _MODEL_TABLES[kind]
    data = "" if kind == "builtin" else '[data]\npath = "d.npz"\n'
    text = f'name = "w"\n[model]\nkind = "{kind}"\n{body}\n{data}'
    msg, listed = _unknown_key_answer(text)
    assert f"did you mean {meant!r}?" in msg, msg
    assert meant in listed and "kind" in listed, msg
    if kind != "hf":
        assert "num_labels" not in listed, msg  # keys of other kinds are not offered


@pytest.mark.parametrize(
    ("source", "others"),
    [
        ('factory = "m:inputs"', ["path", "text", "max_length"]),
        ('path = "d.npz"', ["factory", "text", "max_length"]),
        ('text = "lines.txt"', ["factory", "path"]),
    ],
)
def test_misspelled_data_key_gets_a_hint_and_the_keys_of_that_source(
    source: str, others: list[str]
) -> None:
    kind = 'kind = "hf"\npath = "folder"' if "text" in source else 'kind = "fake"'
    text = f'name = "w"\n[model]\n{kind}\n[data]\n{source}\nquality_sampels = 8\n'
    msg, listed = _unknown_key_answer(text)
    assert "data.quality_sampels: unknown key; did you mean 'quality_samples'?" in msg, msg
    assert {"quality_samples", "variable_axes", source.split(" ")[0]} <= set(listed), msg
    assert not set(others) & set(listed), msg


@pytest.mark.parametrize(
    ("table", "wrong", "meant", "also"),
    [
        ("[quality]", "max_dorp = 0.1", "max_drop", "metric"),
        ("[search]", "batch_size = [1]", "batch_sizes", "precisions"),
        ("[constraints]", "max_p50ms = 5", "max_p50_ms", "max_peak_memory_mb"),
        (
            '[[candidates]]\nlabel = "a"\nruntime = "fake"',
            "optoins = { threads = 1 }",
            "options",
            "precision",
        ),
    ],
)
def test_misspelled_key_in_every_other_table(table: str, wrong: str, meant: str, also: str) -> None:
    text = f'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n{table}\n{wrong}\n'
    msg, listed = _unknown_key_answer(text)
    assert f"did you mean {meant!r}?" in msg, msg
    assert meant in listed and also in listed, msg


# ---------------------------------------------------------------- wrong values


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [search]
        batch_sizes = "32"
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "search.batch_sizes" in msg
    assert "'32'" in msg


def test_non_positive_batch_size_is_rejected(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [search]
        batch_sizes = [1, 0]
        """,
    )
    assert "search.batch_sizes" in _load_error(path)


def test_unknown_runtime_name(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [search]
        runtimes = ["onnxruntim"]
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "unknown runtime 'onnxruntim'" in msg
    assert "did you mean 'onnxruntime'?" in msg


def test_torch_model_without_factory(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        name = "w"
        [model]
        kind = "torch"
        [data]
        path = "d.npz"
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "model" in msg
    assert "needs factory" in msg


@pytest.mark.parametrize(
    ("path", "expected"),
    [("", 'needs path = "model.tflite"'), ('path = "m.onnx"', "got 'm.onnx'")],
)
def test_a_tflite_model_needs_a_tflite_file(path: str, expected: str) -> None:
    text = f'name = "w"\n[model]\nkind = "tflite"\n{path}\n[data]\npath = "d.npz"\n'
    with pytest.raises(UserError) as info:
        parse_spec(text, "w.toml")
    assert expected in str(info.value)


def test_a_tflite_model_runs_on_litert_and_openvino_by_default() -> None:
    spec = parse_spec(
        'name = "w"\n[model]\nkind = "tflite"\npath = "m.TFLITE"\n[data]\npath = "d.npz"\n',
        "w.toml",
    )
    assert default_runtimes(spec.model.kind) == ["litert", "openvino"]


def test_a_file_that_is_no_tflite_flatbuffer_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.tflite").write_bytes(b"\x00\x00\x00\x00ONNX and more")
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 3), np.float32))
    path = tmp_path / "w.toml"
    path.write_text(
        'name = "w"\n[model]\nkind = "tflite"\npath = "m.tflite"\n[data]\npath = "d.npz"\n'
    )
    msg = _load_error(path)
    assert "not a TFLite flatbuffer" in msg and "TFL3" in msg


def test_invalid_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "w"\n[model\nkind = "fake"\n', data=False)
    msg = _load_error(path)
    assert str(path) in msg
    assert "not valid TOML" in msg


def test_parse_spec_rejects_invalid_metric() -> None:
    with pytest.raises(UserError) as info:
        parse_spec(
            'name = "w"\n[model]\nkind = "fake"\n[data]\npath = "d.npz"\n'
            '[quality]\nmetric = "f1"\n',
            "inline.toml",
        )
    assert "inline.toml" in str(info.value)
    assert "quality.metric" in str(info.value)


def test_missing_workload_file(tmp_path: Path) -> None:
    msg = _load_error(tmp_path / "nope.toml")
    assert "no such workload file" in msg


def test_data_of_python_objects_is_refused_never_unpickled(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"")
    np.savez(tmp_path / "obj.npz", input=np.array([{"a": 1}] * 8, dtype=object))
    path = _write(
        tmp_path,
        'name = "x"\n[model]\nkind = "onnx"\npath = "m.onnx"\n[data]\npath = "obj.npz"\n',
        data=False,
    )
    msg = _load_error(path)
    assert "obj.npz" in msg and "never does: save numeric arrays" in msg


# ---------------------------------------------------------------- data factories


def test_data_factory_module_cannot_be_imported(tmp_path: Path) -> None:
    missing = _unique("no_such_module")
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        factory = "{missing}:make"
        """,
        data=False,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "data.factory" in msg
    assert missing in msg
    assert "cannot import" in msg
    assert str(tmp_path.resolve()) in msg  # says where it looked


def test_data_factory_module_raising_on_import(tmp_path: Path) -> None:
    mod = _unique("broken_data")
    (tmp_path / f"{mod}.py").write_text("raise RuntimeError('kaboom at import')\n")
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{mod}:make"\n',
        data=False,
    )
    msg = _load_error(path)
    assert "data.factory" in msg
    assert "kaboom at import" in msg


def test_data_factory_attribute_missing(tmp_path: Path) -> None:
    mod = _unique("my_data")
    (tmp_path / f"{mod}.py").write_text("def other():\n    return None\n")
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{mod}:make"\n',
        data=False,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "data.factory" in msg
    assert "no attribute 'make'" in msg


def test_data_factory_raising_is_a_user_error(tmp_path: Path) -> None:
    mod = _unique("my_data")
    (tmp_path / f"{mod}.py").write_text("def make():\n    raise ValueError('bad data')\n")
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{mod}:make"\n',
        data=False,
    )
    msg = _load_error(path)
    assert "data.factory" in msg
    assert "ValueError: bad data" in msg


def test_data_arrays_disagree_on_sample_count(tmp_path: Path) -> None:
    mod = _unique("my_data")
    (tmp_path / f"{mod}.py").write_text(
        "import numpy as np\n"
        "def make():\n"
        "    return {'ids': np.zeros((8, 4)), 'mask': np.zeros((6, 4))}\n"
    )
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{mod}:make"\n',
        data=False,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "disagree on the number of samples" in msg
    assert "ids (8, 4) has 8" in msg and "mask (6, 4) has 6" in msg


def test_labels_disagree_with_inputs_in_npz(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", input=np.zeros((8, 3)), labels=np.zeros(7, dtype=np.int64))
    path = _write(tmp_path, f'name = "w"\n{FAKE_MODEL}[data]\npath = "d.npz"\n', data=False)
    msg = _load_error(path)
    assert "disagree on the number of samples" in msg
    assert "labels (7,) has 7" in msg


def test_accuracy_metric_without_labels(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [quality]
        metric = "accuracy"
        """,
    )
    msg = _load_error(path)
    assert str(path) in msg
    assert "accuracy" in msg
    assert "needs labels" in msg


def test_accuracy_metric_with_labels_in_npz_loads(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "d.npz",
        input=np.zeros((8, 3), dtype=np.float32),
        labels=np.arange(8) % 2,
    )
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\npath = "d.npz"\n[quality]\nmetric = "accuracy"\n',
        data=False,
    )
    w = load_workload(str(path))
    assert set(w.inputs) == {"input"}
    assert w.labels is not None
    assert w.labels.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize(
    ("axes", "expected"),
    [
        ("{ tokens = [1] }", "no input named 'tokens'"),
        ("{ input = [2] }", "axis 2 does not exist"),
        ("{ input = [0] }", "axis 0 is input's batch axis"),
    ],
)
def test_variable_axes_errors_name_the_key(tmp_path: Path, axes: str, expected: str) -> None:
    np.savez(tmp_path / "d.npz", input=np.zeros((8, 3), dtype=np.float32))
    body = f'name = "w"\n{FAKE_MODEL}[data]\npath = "d.npz"\nvariable_axes = {axes}\n'
    msg = _load_error(_write(tmp_path, body, data=False))
    assert "variable_axes" in msg
    assert expected in msg


def test_variable_axes_reach_the_model_source(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", input=np.zeros((8, 6, 3), dtype=np.float32))
    body = f'name = "w"\n{FAKE_MODEL}[data]\npath = "d.npz"\nvariable_axes = {{ input = [1] }}\n'
    assert load_workload(str(_write(tmp_path, body, data=False))).source.variable_axes == {
        "input": [1]
    }


def test_missing_data_file(tmp_path: Path) -> None:
    path = _write(tmp_path, f'name = "w"\n{FAKE_MODEL}[data]\npath = "gone.npz"\n', data=False)
    msg = _load_error(path)
    assert "data.path" in msg
    assert "no such file" in msg


# ---------------------------------------------------------------- the CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_bad_workload_exits_2_without_traceback(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        name = "w"
        {FAKE_MODEL}
        [data]
        path = "d.npz"
        [search]
        runtime = ["fake"]
        """,
    )
    store = tmp_path / "store" / "bakeoff.db"
    proc = _cli("run", str(path), "--store", str(store))
    assert proc.returncode == 2, proc.stderr
    assert "search.runtime" in proc.stderr
    assert "did you mean 'runtimes'?" in proc.stderr
    assert str(path) in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not store.exists()  # validation happens before anything is written


def test_cli_missing_data_factory_exits_2_without_traceback(tmp_path: Path) -> None:
    missing = _unique("no_such_module")
    path = _write(
        tmp_path,
        f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{missing}:make"\n',
        data=False,
    )
    proc = _cli("run", str(path), "--store", str(tmp_path / "s.db"))
    assert proc.returncode == 2, proc.stderr
    assert "data.factory" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------- a valid torch workload


def test_valid_torch_workload_finds_module_next_to_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    pytest.importorskip("torch")
    wdir = tmp_path / "workload"
    wdir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the module must be found next to the TOML, not in cwd
    monkeypatch.delitem(sys.modules, "my_model", raising=False)
    request.addfinalizer(lambda: sys.modules.pop("my_model", None))
    (wdir / "my_model.py").write_text(
        textwrap.dedent(
            """\
            import numpy as np
            import torch


            def build():
                return torch.nn.Sequential(
                    torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
                )


            def inputs():
                return np.random.default_rng(0).random((16, 4), dtype=np.float32)
            """
        )
    )
    (wdir / "w.toml").write_text(
        textwrap.dedent(
            """\
            name = "tiny"
            [model]
            kind = "torch"
            factory = "my_model:build"
            [data]
            factory = "my_model:inputs"
            [search]
            runtimes = ["torch"]
            precisions = ["fp32"]
            batch_sizes = [1, 4]
            """
        )
    )
    w = load_workload(str(wdir / "w.toml"))
    assert w.name == "tiny"
    assert w.origin == str(wdir / "w.toml")
    assert w.source.kind == "torch"
    assert w.source.factory == "my_model:build"
    assert w.source.base_dir == str(wdir.resolve())
    assert list(w.inputs) == ["input"]
    assert w.inputs["input"].shape == (16, 4)
    assert w.n_samples == 16
    assert w.labels is None
    assert w.spec.search.batch_sizes == [1, 4]
    # the imported module is the one beside the workload file
    assert Path(sys.modules["my_model"].__file__).resolve() == (wdir / "my_model.py").resolve()


def test_same_module_name_in_two_folders_loads_each_folders_module(tmp_path: Path) -> None:
    mod = _unique("data_mod")
    paths = []
    for folder, n in (("a", 8), ("b", 12)):
        d = tmp_path / folder
        d.mkdir()
        (d / f"{mod}.py").write_text(
            f"import numpy as np\ndef make():\n    return np.zeros(({n}, 2), dtype=np.float32)\n"
        )
        (d / "w.toml").write_text(f'name = "w"\n{FAKE_MODEL}[data]\nfactory = "{mod}:make"\n')
        paths.append(d / "w.toml")
    try:
        assert load_workload(str(paths[0])).n_samples == 8
        assert load_workload(str(paths[1])).n_samples == 12
    finally:
        sys.modules.pop(mod, None)


def test_builtin_model_in_a_toml_keeps_its_data_and_takes_the_users_search(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.toml"
    path.write_text(
        'name = "my-digits"\n[model]\nkind = "builtin"\nname = "digits"\n'
        '[search]\nruntimes = ["onnxruntime"]\nbatch_sizes = [8]\n'
    )
    wl = load_workload(str(path))
    assert wl.name == "my-digits"
    assert wl.spec.search.runtimes == ["onnxruntime"]
    assert wl.spec.search.batch_sizes == [8]
    assert wl.spec.quality.metric == "accuracy"  # the built-in's own gate stays
    assert wl.labels is not None and wl.n_samples == len(wl.labels)


def test_builtin_model_without_name_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "x"\n[model]\nkind = "builtin"\n')
    with pytest.raises(UserError, match="model"):
        load_workload(str(path))


def test_data_is_required_for_user_models(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "x"\n[model]\nkind = "onnx"\npath = "m.onnx"\n')
    with pytest.raises(UserError, match="data"):
        load_workload(str(path))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show"], "Missing argument 'RUN_ID'"),
        (["run", "--bogus"], "No such option: --bogus"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
    ],
)
def test_command_line_usage_errors_are_one_message_not_a_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"budget_s": -5.0}, "--budget"),
        ({"budget_s": 0.0}, "--budget"),
        ({"trial_timeout_s": 0.0}, "--trial-timeout"),
        ({"threads": 0}, "--threads"),
        ({"cold_starts": 0}, "--cold-starts"),
        ({"margin": 0.7}, "--margin"),
        ({"ci_target": 0.0}, "--ci-target"),
        ({"scenario": "batch"}, "--scenario"),
        ({"constraints": {"max_p99_ms": 0.0}}, "--max-p99-ms must be positive"),
        ({"constraints": {"max_p99": 5.0}}, "unknown constraint 'max_p99'"),
    ],
)
def test_bad_run_options_are_refused_before_any_work(
    options: dict[str, object], flag: str, tmp_path: Path
) -> None:
    """A negative budget once started a whole MiniLM run with 'budget -2 s'."""
    from bakeoff import api

    store = tmp_path / "bakeoff.db"
    with pytest.raises(UserError, match=flag):
        api.run("builtin:digits", api.RunOptions(store=store, **options))  # type: ignore[arg-type]
    assert not store.exists()
