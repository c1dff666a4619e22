"""`--mlflow`: a fake-backend bake-off logged to MLflow and read back with
MlflowClient; the client missing, a bad URI and a store failing after the run;
`bakeoff train --mlflow` curves by step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from typer.testing import CliRunner

from bakeoff.cli import app
from bakeoff.cli.options import OPTIONAL_VALUES, with_optional_values
from bakeoff.errors import BakeoffError, UserError
from bakeoff.report import mlflow_log
from extras import require_module
from short_recipe import write_mlp_and_digits

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# Not imported here: importing mlflow at collection, before conftest points HOME into a
# temp dir, would write MLflow's telemetry id under the real ~/.config.
require_module("mlflow", "pip install 'bakeoff[mlflow]'")

ROOT = Path(__file__).resolve().parents[2]
# int8 loses half its cosine: rejected by the quality gate, with a reason and no timings.
WORKLOAD = """name = "mlflow-fake"
[model]
kind = "fake"
options = { latency_ms = { fp32 = 2.0, int8 = 1.0 }, error = { int8 = 0.5 }, model_mb = 3 }
[data]
path = "d.npz"
[search]
runtimes = ["fake"]
precisions = ["fp32", "int8"]
batch_sizes = [1, 4]
"""


def _workload(folder: Path) -> Path:
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    path = folder / "w.toml"
    path.write_text(WORKLOAD)
    return path


def _reader(uri: str, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    """A client to read the runs back; MLflow 3 opens a folder of runs only when told to
    (bakeoff itself sets this while it logs, and unsets it after: see `logged`)."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One fake bake-off through the command line with `--mlflow file:...`."""
    folder = tmp_path_factory.mktemp("mlflow")
    wl, store, doc_path = _workload(folder), folder / "s.db", folder / "r.json"
    uri = (folder / "mlruns").as_uri()
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    args = ["run", str(wl), "--quick", "--store", str(store), "--json", str(doc_path)]
    result = CliRunner().invoke(app, [*args, "--mlflow", uri])
    assert result.exit_code == 0, result.output
    # The opt-in for the folder store was bakeoff's, for its own calls only.
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    return {
        "doc": json.loads(doc_path.read_text()),
        "uri": uri,
        "store": store,
        "output": result.output,
    }


def test_one_parent_run_and_a_child_per_candidate_with_the_documents_figures(
    logged: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, client = logged["doc"], _reader(logged["uri"], monkeypatch)
    exp = client.get_experiment_by_name("mlflow-fake")  # the workload's name
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    [parent] = parents
    assert parent.info.run_name == doc["run_id"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["bakeoff.run_id"] == doc["run_id"]
    for v in doc["verdicts"]:
        assert parent.data.tags[f"bakeoff.winner.b{v['batch_size']}"] == v["winner"]
        assert parent.data.tags[f"bakeoff.verdict.b{v['batch_size']}"] == v["reason"]
    assert [v["winner"] for v in doc["verdicts"]] == ["fake-fp32-b1", "fake-fp32-b4"]
    assert parent.data.params["settings.scenario"] == "latency"
    assert parent.data.params["settings.batch_sizes"] == "[1, 4]"

    children = {r.data.tags["bakeoff.candidate_id"]: r for r in runs if r is not parent}
    cands = {c["id"]: c for c in doc["candidates"]}
    assert set(children) == set(cands) and len(runs) == len(cands) + 1
    for cid, c in cands.items():
        run = children[cid]
        assert run.info.run_name == cid
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["bakeoff.run_id"] == doc["run_id"]
        assert run.data.tags["bakeoff.status"] == c["status"]
        assert run.data.tags.get("bakeoff.reason", "") == c["reason"]
        assert run.data.params["runtime"] == "fake"
        assert run.data.params["precision"] == c["precision"]
        assert run.data.params["batch_size"] == str(c["batch_size"])
        assert run.data.params["threads"] == str(doc["settings"]["threads"])
        for key, value in c["settings"].items():
            assert run.data.params[f"settings.{key}"] == str(value)
        lat, thr = c["latency_ms"] or {}, c["throughput"] or {}
        expected = {
            "latency_p50_ms": lat.get("p50"),
            "latency_p99_ms": lat.get("p99"),
            "throughput_samples_per_s": thr.get("samples_per_s"),
            "quality": c["quality"]["value"],
            "peak_rss_mb": c["peak_rss_mb"],
            "model_size_mb": c["model_size_mb"],
        }
        # Exactly the document's numbers; what it does not have is not logged at all.
        assert run.data.metrics == {k: v for k, v in expected.items() if v is not None}
    ok, rejected = children["fake-fp32-b1"], children["fake-int8-b1"]
    assert ok.data.metrics["model_size_mb"] == 3
    assert ok.data.metrics["latency_p50_ms"] == pytest.approx(2.0, rel=0.05)
    assert cands["fake-int8-b1"]["status"] == "rejected"
    assert "quality" in rejected.data.metrics and "latency_p50_ms" not in rejected.data.metrics
    assert rejected.data.tags["bakeoff.reason"]  # the quality gate's words

    # The JSON document and the HTML report ride on the parent.
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert names == {f"bakeoff-{doc['run_id']}.json", f"report-{doc['run_id']}.html"}
    report = mlflow_artifact(client, parent.info.run_id, f"report-{doc['run_id']}.html")
    assert "<svg" in report.read_text() and doc["run_id"] in report.read_text()
    logged_doc = json.loads(
        mlflow_artifact(client, parent.info.run_id, f"bakeoff-{doc['run_id']}.json").read_text()
    )
    assert logged_doc == doc
    assert "MLflow: run" in logged["output"] and f"{len(cands)} child runs" in logged["output"]


def mlflow_artifact(client: MlflowClient, run_id: str, name: str) -> Path:
    """Where a logged artifact lies (the folder store keeps it on disk)."""
    root = client.get_run(run_id).info.artifact_uri
    assert root.startswith("file:")
    return Path(root.removeprefix("file://")) / name


def test_mlflow_alone_is_the_mlruns_folder_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--mlflow` with no value is ./mlruns of the folder the command runs in, made
    when the command starts (checked before any measuring)."""
    assert with_optional_values(["run", "w.toml", "--mlflow"], OPTIONAL_VALUES) == [
        "run",
        "w.toml",
        "--mlflow",
        "./mlruns",
    ]
    assert with_optional_values(["--mlflow", "--quick"], OPTIONAL_VALUES) == [
        "--mlflow",
        "./mlruns",
        "--quick",
    ]
    assert with_optional_values(["--mlflow", "http://h:5000"], OPTIONAL_VALUES) == [
        "--mlflow",
        "http://h:5000",
    ]
    assert with_optional_values(["--", "--mlflow"], OPTIONAL_VALUES) == ["--", "--mlflow"]
    monkeypatch.chdir(tmp_path)
    assert mlflow_log.tracking_uri("./mlruns") == (tmp_path / "mlruns").resolve().as_uri()
    # No such run to resume: the command stops with a user error after --mlflow was checked.
    result = CliRunner().invoke(
        app, ["run", "--resume", "nope", "--store", str(tmp_path / "s.db"), "--mlflow"]
    )
    assert isinstance(result.exception, UserError), result.output
    assert "no store" in str(result.exception)
    assert (tmp_path / "mlruns").is_dir()  # the folder store MLflow made


def test_a_bad_uri_or_a_workload_taken_as_one_is_said_before_the_run(tmp_path: Path) -> None:
    wl, store = _workload(tmp_path), tmp_path / "s.db"
    base = ["run", str(wl), "--quick", "--store", str(store)]
    bad = CliRunner().invoke(app, [*base, "--mlflow", "nosuchscheme://x"])
    assert isinstance(bad.exception, UserError), bad.output
    assert "--mlflow nosuchscheme://x" in str(bad.exception)
    swapped = CliRunner().invoke(app, ["run", "--mlflow", str(wl), "--quick"])
    assert isinstance(swapped.exception, UserError), swapped.output
    assert "give the workload before --mlflow" in str(swapped.exception)
    assert not store.exists()  # nothing was measured


def test_without_the_client_the_install_command_is_said_before_the_run(tmp_path: Path) -> None:
    """mlflow not importable (the extra not installed): exit 2, the install command,
    no traceback, and no run started."""
    wl, store = _workload(tmp_path), tmp_path / "s.db"
    # sys.modules[name] = None makes `import name` raise ImportError, as when absent.
    code = (
        "import sys\n"
        "for m in ('mlflow', 'mlflow.tracking', 'mlflow.exceptions'): sys.modules[m] = None\n"
        "from bakeoff.cli import main\n"
        f"sys.argv = ['bakeoff', 'run', {str(wl)!r}, '--quick', '--store', {str(store)!r}, "
        "'--mlflow']\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install 'bakeoff[mlflow]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists() and not (tmp_path / "mlruns").exists()


def test_a_store_failing_after_the_run_loses_nothing(
    logged: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The artifacts cannot be written: a BakeoffError (exit 1, a message) that says the
    run is safe in bakeoff's store, and the half-logged parent marked FAILED."""
    from mlflow.tracking import MlflowClient

    from bakeoff.cli import tracking

    def refuse(self: MlflowClient, run_id: str, local_path: str, *a: Any, **k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(MlflowClient, "log_artifact", refuse)
    uri = (tmp_path / "mlruns").as_uri()
    doc = logged["doc"]
    with pytest.raises(BakeoffError, match="disk full") as failed:
        tracking.log(uri, doc, logged["store"])
    assert "Nothing is lost" in str(failed.value) and f"bakeoff show {doc['run_id']}" in str(
        failed.value
    )
    client = _reader(uri, monkeypatch)
    exp = client.get_experiment_by_name("mlflow-fake")
    assert exp is not None
    [parent] = client.search_runs([exp.experiment_id], "tags.bakeoff.kind = 'inference'")
    assert parent.info.status == "FAILED"


def test_keys_and_values_fit_mlflows_limits() -> None:
    params = mlflow_log._params({"settings": {"a:b": "x" * 7000, "a_b": "second", "n": None}})
    assert list(params) == ["settings.a_b"]  # ':' is replaced; the first of two keeps it
    assert len(params["settings.a_b"]) == mlflow_log.MAX_PARAM_VALUE
    assert mlflow_log._params({"l": [1, 2], "k" * 300: 1}) == {"l": "[1, 2]", "k" * 250: "1"}
    tags = mlflow_log._tags({"r": "y" * 9000, "none": None})
    assert list(tags) == ["r"] and len(tags["r"]) == mlflow_log.MAX_TAG_VALUE


def test_nothing_lands_in_the_repository_or_home(logged: dict[str, Any]) -> None:
    assert not (ROOT / "mlruns").exists()
    assert not (ROOT / "mlflow.db").exists()
    # bakeoff runs offline: MLflow's telemetry stays off, so it keeps no id under ~.
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert not (Path.home() / ".config" / "mlflow").exists()


RECIPE = """name = "mlflow-mlp"
[model]
kind = "torch"
factory = "mlp:build"
[train]
data = "d.npz"
optimizer = "sgd"
lr = 0.1
steps = 20
eval_every = 10
tolerance = 0.3
stacks = ["torch"]
target = { value = 0.3 }
"""


# A whole training run (about 30 s, more on a loaded machine): make test-slow.
@pytest.mark.slow
def test_train_logs_each_seeds_curves_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bakeoff train --mlflow`: a parent run, a child per stack, the training loss at
    every step and the validation metric at every evaluation, as in the document."""
    write_mlp_and_digits(tmp_path)
    (tmp_path / "recipe.toml").write_text(RECIPE)
    uri, doc_path = (tmp_path / "mlruns").as_uri(), tmp_path / "t.json"
    args = ["train", str(tmp_path / "recipe.toml"), "--seeds", "1", "--quick", "--budget", "1"]
    args += ["--store", str(tmp_path / "s.db"), "--json", str(doc_path), "--mlflow", uri]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(doc_path.read_text())
    client = _reader(uri, monkeypatch)
    exp = client.get_experiment_by_name("mlflow-mlp")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.run_name == doc["run_id"] and parent.data.tags["bakeoff.kind"] == "train"
    for v in doc["verdicts"]:
        assert parent.data.tags[f"bakeoff.winner.{v['objective']}"] == (v["winner"] or "none")
    [child] = [r for r in runs if r is not parent]
    [cand] = doc["candidates"]
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert child.data.tags["bakeoff.candidate_id"] == cand["id"] == "torch"
    assert child.data.params["stack"] == "torch"
    # Under load a one-second budget may leave no throughput figure: then none is
    # logged (never a 0), else the document's.
    throughput = (cand.get("samples_per_s") or {}).get("value")
    assert child.data.metrics.get("samples_per_s") == throughput
    [seed] = cand["seeds"]
    metric = doc["workload"]["target"]["metric"]
    loss = client.get_metric_history(child.info.run_id, "train_loss/seed0")
    assert [(m.step, m.value) for m in loss] == list(enumerate(seed["losses"], start=1))
    assert len(loss) == 20
    val = client.get_metric_history(child.info.run_id, f"val_{metric}/seed0")
    assert [(m.step, m.value) for m in val] == [(int(s), v) for s, v, _ in seed["evals"]]
    assert val
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert f"report-{doc['run_id']}.html" in names
