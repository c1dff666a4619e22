"""`--mlflow [URI]`: a finished bake-off's result document as MLflow runs.

One parent run per bake-off (named by the bakeoff run id, in the experiment named
by the workload) and one child run per candidate (inference) or stack (training),
nested the way MLflow nests runs: the child's `mlflow.parentRunId` tag. Everything
logged is read from the result document (and the report written from it), so data
flows one way, run -> document -> MLflow, and what MLflow shows is what
`bakeoff show --json` shows: a figure missing from the document (a candidate that
was never measured) is not logged at all, never as 0.

mlflow-skinny is an optional extra, imported inside these functions only; `check`
runs before the bake-off starts, so a missing client or a store MLflow cannot open
is said before any time is spent measuring, not after.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import urlparse

from bakeoff.errors import BakeoffError, UserError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = [
    "DEFAULT_URI",
    "INSTALL",
    "Logged",
    "check",
    "log_inference",
    "log_training",
    "tracking_uri",
]

INSTALL = "pip install 'bakeoff[mlflow]'"
DEFAULT_URI = "./mlruns"  # what `--mlflow` alone logs to, relative to the working folder

# MLflow's limits. Tag values are 8000 characters in MLflow 3 but were 5000 before,
# and a remote tracking server may be older than this client: the smaller one holds
# for both. Keys longer than 250 characters, or with other characters than these,
# are refused by every store.
MAX_TAG_VALUE = 5000
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
_KEY_BAD = re.compile(r"[^\w.\- /]")  # no ':' either: the Windows stores refuse it
MAX_PARAMS_OR_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000


@dataclass(frozen=True)
class Logged:
    """Where a bake-off went: its experiment, its parent run and a child per candidate."""

    tracking_uri: str
    experiment_name: str
    experiment_id: str
    parent_run_id: str
    children: dict[str, str] = field(default_factory=dict)  # candidate id -> MLflow run id


def tracking_uri(value: str) -> str:
    """The tracking URI for `--mlflow VALUE`: a URI as given, a plain path (`./mlruns`)
    as a `file:` URI of the folder it names from here, so the runs land where the
    command was run, whichever folder a later process starts in."""
    scheme = urlparse(value).scheme
    # One letter is a Windows drive (C:\\runs), not a scheme.
    if len(scheme) > 1:
        return value
    return Path(value).expanduser().resolve().as_uri()


def check(uri: str) -> None:
    """Before the bake-off: the client is installed and MLflow can open `uri`'s store.
    A server is not contacted here (a REST store opens without a request); a file or
    database store is created if it is not there yet."""
    with _client(uri):
        pass


def log_inference(uri: str, doc: dict[str, Any], artifacts: Iterable[Path] = ()) -> Logged:
    """An inference bake-off's document: the parent run with the verdicts, a child per
    candidate with its latency, throughput, quality, memory and size; `artifacts` (the
    JSON document, the HTML report) on the parent."""
    parent_params = {
        "workload": doc["workload"]["name"],
        "workload.origin": doc["workload"].get("origin"),
        "workload.model_kind": doc["workload"].get("model_kind"),
        "settings": doc.get("settings") or {},
    }
    parent_tags: dict[str, Any] = {"bakeoff.kind": "inference"}
    summary = []
    for v in doc["verdicts"]:
        key = f"b{v['batch_size']}"
        parent_tags[f"bakeoff.winner.{key}"] = v["winner"] or "none"
        parent_tags[f"bakeoff.verdict.{key}"] = v["reason"]
        summary.append(
            f"- batch {v['batch_size']} ({v['objective']}): {v['headline'] or v['reason']}"
        )
    threads = (doc.get("settings") or {}).get("threads")
    children = []
    for c in doc["candidates"]:
        settings = c.get("settings") or {}
        params = {
            "runtime": c["runtime"],
            "precision": c["precision"],
            "method": c.get("method"),
            "label": c.get("label"),
            "batch_size": c["batch_size"],
            # what the runtime applied where it says, else what the run asked of all
            "threads": settings.get("threads", threads),
            "settings": settings,
            "options": c.get("options") or {},
        }
        children.append(_Child(c["id"], c["status"], c.get("reason") or "", params, _metrics(c)))
    return _log(uri, doc, parent_params, parent_tags, "\n".join(summary), children, artifacts)


def log_training(uri: str, doc: dict[str, Any], artifacts: Iterable[Path] = ()) -> Logged:
    """A training bake-off's document: the parent run with the verdicts, a child per
    stack with its summary figures and each seed's curves by step (the training loss
    at every step, the validation metric at every evaluation)."""
    from bakeoff.report.training import verdict_words

    wl = doc["workload"]
    metric = wl["target"]["metric"]
    parent_params = {
        "workload": wl["name"],
        "target.metric": metric,
        "target.value": wl["target"]["value"],
        "seeds": (doc.get("environment") or {}).get("seeds"),
        "settings": doc.get("settings") or {},
    }
    parent_tags: dict[str, Any] = {"bakeoff.kind": "train"}
    summary = []
    for v in doc["verdicts"]:
        parent_tags[f"bakeoff.winner.{v['objective']}"] = v["winner"] or "none"
        parent_tags[f"bakeoff.verdict.{v['objective']}"] = verdict_words(v)
        summary.append(f"- {v['objective']}: {verdict_words(v)}")
    children = []
    for c in doc["candidates"]:
        params = {
            "stack": c["stack"],
            "processes": c.get("processes"),
            "threads": c.get("threads_per_process"),
            "settings": c.get("settings") or {},
        }
        figures = {
            "samples_per_s": (c.get("samples_per_s") or {}).get("value"),
            "tokens_per_s": (c.get("tokens_per_s") or {}).get("value"),
            "time_to_target_s": (c.get("time_to_target_s") or {}).get("score"),
            f"final_{metric}": (c.get("final_metric") or {}).get("mean"),
            "peak_rss_mb": (c.get("peak_rss_mb") or {}).get("max_rank"),
            "data_wait_share": c.get("data_wait_share"),
            "compile_s": c.get("compile_s"),
        }
        metrics = [(_key(k), float(x), 0) for k, x in figures.items() if _number(x)]
        for seed in c.get("seeds") or []:
            k = seed["seed"]
            # The steps are 1-based, as the report's and TensorBoard's curves count them.
            metrics += [
                (f"train_loss/seed{k}", float(loss), step)
                for step, loss in enumerate(seed["losses"], start=1)
                if _number(loss)
            ]
            metrics += [
                (_key(f"val_{metric}/seed{k}"), float(value), int(step))
                for step, value, _train_s in seed["evals"]
                if _number(value)
            ]
        children.append(_Child(c["id"], c["status"], c.get("reason") or "", params, metrics))
    return _log(uri, doc, parent_params, parent_tags, "\n".join(summary), children, artifacts)


# ---------------------------------------------------------------- the document's figures


def _number(x: Any) -> TypeGuard[float]:
    """A figure to log: a real number (a bool is not one; None means not measured)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def _metrics(c: dict[str, Any]) -> list[tuple[str, float, int]]:
    """A candidate's figures, exactly as its document gives them (step 0)."""
    latency = c.get("latency_ms") or {}
    figures = {
        "latency_p50_ms": latency.get("p50"),
        "latency_p99_ms": latency.get("p99"),
        "throughput_samples_per_s": (c.get("throughput") or {}).get("samples_per_s"),
        "quality": (c.get("quality") or {}).get("value"),
        "peak_rss_mb": c.get("peak_rss_mb"),
        "model_size_mb": c.get("model_size_mb"),
    }
    return [(k, float(x), 0) for k, x in figures.items() if _number(x)]


def _key(name: str) -> str:
    """A param, metric or tag key MLflow accepts: its characters and its length."""
    return _KEY_BAD.sub("_", name)[:MAX_KEY]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    """Nested settings as `prefix.key` params; lists as JSON; None left out."""
    if value is None:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}" if prefix else str(k), v)
    elif isinstance(value, list | tuple):
        yield prefix, json.dumps(value, default=str)
    else:
        yield prefix, str(value)


def _params(values: dict[str, Any]) -> dict[str, str]:
    """Params by key; two names that become one key keep the first (MLflow refuses
    a batch that names a key twice)."""
    out: dict[str, str] = {}
    for name, value in _flat("", values):
        out.setdefault(_key(name), _clip(value, MAX_PARAM_VALUE))
    return out


def _tags(values: dict[str, Any]) -> dict[str, str]:
    return {_key(k): _clip(str(v), MAX_TAG_VALUE) for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class _Child:
    candidate_id: str
    status: str
    reason: str
    params: dict[str, Any]
    metrics: list[tuple[str, float, int]]  # key, value, step


# ---------------------------------------------------------------- MLflow


@contextmanager
def _client(uri: str) -> Iterator[MlflowClient]:
    """An MlflowClient on `uri` (never the process-wide tracking URI, which would leak
    into every later caller in the process), or a UserError that says what is wrong."""
    # bakeoff runs offline; MLflow's usage telemetry, decided when mlflow is first
    # imported, stays off unless the user asked for it.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError(f"--mlflow needs the MLflow client (mlflow-skinny): {INSTALL}") from None
    with _file_store_allowed(uri):
        try:
            client = MlflowClient(tracking_uri=uri)
        except ImportError as exc:  # sqlite:// and the other databases need SQLAlchemy
            raise UserError(
                f"--mlflow {uri}: this tracking store needs {exc.name or 'a package'}, which "
                "mlflow-skinny leaves out (pip install sqlalchemy alembic, or the full mlflow)"
            ) from None
        except MlflowException as exc:
            raise UserError(f"--mlflow {uri}: {exc.message}") from None
        yield client


@contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 refuses a folder of runs (`./mlruns`, the issue's default) unless
    MLFLOW_ALLOW_FILE_STORE is set; `--mlflow` asked for that folder, so bakeoff sets
    it while it logs, where the user has not set it either way, and puts it back."""
    is_folder = urlparse(uri).scheme in ("", "file")
    if not is_folder or "MLFLOW_ALLOW_FILE_STORE" in os.environ:
        yield
        return
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def _log(
    uri: str,
    doc: dict[str, Any],
    parent_params: dict[str, Any],
    parent_tags: dict[str, Any],
    summary: str,
    children: list[_Child],
    artifacts: Iterable[Path],
) -> Logged:
    """The parent run, its children, the artifacts; on a failure partway the parent is
    marked FAILED (so it does not pass for a whole bake-off) and a BakeoffError says
    the results are safe in bakeoff's own store."""
    from mlflow.exceptions import MlflowException

    name = doc["workload"]["name"]
    with _client(uri) as client:
        parent_id: str | None = None
        try:
            experiment_id = _experiment(client, name)
            parent = client.create_run(
                experiment_id,
                run_name=doc["run_id"],
                tags=_tags(
                    {
                        **parent_tags,
                        "bakeoff.run_id": doc["run_id"],
                        "bakeoff.version": doc.get("bakeoff_version"),
                        # shown as the run's description in the MLflow UI
                        "mlflow.note.content": summary,
                    }
                ),
            )
            parent_id = parent.info.run_id
            _batch(client, parent_id, _params(parent_params), [])
            logged = Logged(uri, name, experiment_id, parent_id)
            for child in children:
                logged.children[child.candidate_id] = _child(
                    client, experiment_id, parent_id, doc["run_id"], child
                )
            for path in artifacts:
                client.log_artifact(parent_id, str(path))
            client.set_terminated(parent_id, "FINISHED")
            return logged
        # Any failure here (a server down, a full disk, a store that refuses a value)
        # comes after the whole bake-off: it must end in a message, not a traceback
        # that hides that the results are safe. Ctrl-C is no Exception and still stops.
        except Exception as exc:
            if parent_id is not None:
                # the store that just failed may be gone: the error below says so
                with suppress(Exception):
                    client.set_terminated(parent_id, "FAILED")
            why = exc.message if isinstance(exc, MlflowException) else str(exc) or repr(exc)
            raise BakeoffError(
                f"logging run {doc['run_id']} to MLflow at {uri} failed: {why}. Nothing is "
                f"lost: the run is in bakeoff's store (`bakeoff show {doc['run_id']}`, "
                f"`bakeoff report {doc['run_id']}`)"
            ) from None


def _experiment(client: MlflowClient, name: str) -> str:
    """The experiment named `name`, created the first time."""
    found = client.get_experiment_by_name(name)
    if found is None:
        return str(client.create_experiment(name))
    if found.lifecycle_stage == "deleted":
        # MLflow keeps a deleted experiment's name taken until it is purged.
        raise UserError(
            f"the MLflow experiment {name!r} was deleted; restore it "
            f"(mlflow experiments restore --experiment-id {found.experiment_id}) or purge it"
        )
    return str(found.experiment_id)


def _child(
    client: MlflowClient, experiment_id: str, parent_id: str, run_id: str, child: _Child
) -> str:
    tags = _tags(
        {
            "mlflow.parentRunId": parent_id,
            "bakeoff.run_id": run_id,
            "bakeoff.candidate_id": child.candidate_id,
            "bakeoff.status": child.status,
            "bakeoff.reason": child.reason or None,
        }
    )
    run = client.create_run(experiment_id, run_name=child.candidate_id, tags=tags)
    _batch(client, run.info.run_id, _params(child.params), child.metrics)
    # A candidate that could not be built or run shows as a failed run; one rejected
    # by the quality gate, or unavailable here, was judged as it should be.
    client.set_terminated(run.info.run_id, "FAILED" if child.status == "failed" else "FINISHED")
    return str(run.info.run_id)


def _batch(
    client: MlflowClient,
    run_id: str,
    params: dict[str, str],
    metrics: list[tuple[str, float, int]],
) -> None:
    """Params and metrics in as few requests as MLflow's batch limits allow."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    items = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(items), MAX_PARAMS_OR_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[i : i + MAX_PARAMS_OR_TAGS_PER_BATCH])
    points = [Metric(k, v, now, step) for k, v, step in metrics]
    for i in range(0, len(points), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=points[i : i + MAX_METRICS_PER_BATCH])
