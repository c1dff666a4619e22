"""`--mlflow` on `bakeoff run` and `bakeoff train`: checked before the run starts,
logged once it has finished (bakeoff.report.mlflow_log does the logging)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from rich.markup import escape

from bakeoff.cli.output import err
from bakeoff.errors import BakeoffError, UserError
from bakeoff.paths import check_writable


def start(value: str | None) -> str | None:
    """The tracking URI `--mlflow VALUE` logs to, checked now, so that a missing client
    or a store MLflow cannot open is said before the bake-off, not after it; None
    without --mlflow."""
    if value is None:
        return None
    from bakeoff.report import mlflow_log

    if value.endswith(".toml") or value.startswith("builtin:"):
        # `bakeoff run --mlflow w.toml`: the option took the workload as its value.
        raise UserError(
            f"--mlflow took {value!r} as its tracking URI: give the workload before "
            "--mlflow, or the URI with it (--mlflow ./mlruns, --mlflow=URI)"
        )
    uri = mlflow_log.tracking_uri(value)
    parsed = urlparse(uri)
    if parsed.scheme == "file":  # a folder of runs: one MLflow could not make is said now
        check_writable(Path(url2pathname(parsed.path)), "--mlflow", folder=True)
    mlflow_log.check(uri)
    return uri


def log(uri: str, doc: dict[str, Any], store: str | Path) -> None:
    """Log a finished run's document, with it and its HTML report as artifacts."""
    from bakeoff import api
    from bakeoff.report import mlflow_log, writer

    run_id = doc["run_id"]
    with tempfile.TemporaryDirectory(prefix="bakeoff-mlflow-") as tmp:
        try:
            document = Path(tmp) / f"bakeoff-{run_id}.json"
            api.write_json(doc, document)
            files = [document, writer.write(run_id, store, Path(tmp) / f"report-{run_id}.html")]
        except Exception as exc:  # a report that cannot be written must not lose the run
            raise BakeoffError(
                f"writing run {run_id}'s report for MLflow failed: {exc}. Nothing is lost: "
                f"the run is in bakeoff's store (`bakeoff show {run_id}`)"
            ) from None
        logger = mlflow_log.log_training if doc.get("kind") == "train" else mlflow_log.log_inference
        logged = logger(uri, doc, files)
    err.print(
        f"MLflow: run {escape(run_id)} logged to {escape(uri)}, experiment "
        f"{escape(logged.experiment_name)!r}: parent run {logged.parent_run_id}, "
        f"{len(logged.children)} child runs",
        highlight=False,
        soft_wrap=True,
    )
