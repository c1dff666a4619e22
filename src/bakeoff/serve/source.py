"""What `bakeoff serve RUN_ID|EXPORT_DIR` serves: an export folder as it is, or a
run's winner, exported first (into the run's folder, once per candidate) by the
same `bakeoff export` a user would run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.errors import UserError
from bakeoff.export import variant_measurements
from bakeoff.export.auto import best_batch
from bakeoff.judge.verdict import chosen
from bakeoff.paths import RunFolder
from bakeoff.store import refuse_generative


def choose_candidate(
    record: dict[str, Any], max_batch_size: int | None, latency_bound_ms: float | None
) -> tuple[str, list[str]]:
    """The candidate to export from a run, and why: with a batch size, the winner of
    that batch size's verdict (else the first verdict's winner variant, measured at
    the batch size nearest below it); with `auto`, of the verdicts' winners, the
    variant and batch size with the best throughput within the latency bound (without
    --latency-bound-ms, auto's own: within a multiple of batch 1's latency)."""
    run_id, doc = record["run_id"], record["document"] or {}
    verdicts = [v for v in doc.get("verdicts") or [] if chosen(v)]
    if not verdicts:
        raise UserError(
            f"run {run_id} has no verdict with a winner to serve; name one with --candidate ID"
        )
    candidates = doc["candidates"]
    by_id = {c["id"]: c for c in candidates}
    if max_batch_size is not None:
        verdict = next((v for v in verdicts if v["batch_size"] == max_batch_size), verdicts[0])
        rows = variant_measurements(candidates, by_id[str(chosen(verdict))])
        below = [r for r in rows if r["batch_size"] <= max_batch_size] or rows
        row = max(below, key=lambda r: r["batch_size"])
        return row["candidate"], [
            f"{row['candidate']}: the batch-{verdict['batch_size']} verdict's recommendation"
            + (
                f", measured at batch {row['batch_size']}"
                if row["batch_size"] != max_batch_size
                else ""
            )
        ]
    # Each winner's best batch size (the reasons are printed by `auto` once served).
    best = [
        best_batch(variant_measurements(candidates, by_id[str(chosen(v))]), latency_bound_ms)[0]
        for v in verdicts
    ]
    measured = [r for r in best if r is not None]
    if not measured:
        return str(chosen(verdicts[0])), [
            "the first verdict's recommendation (no throughput measured)"
        ]
    top = max(measured, key=lambda r: r["samples_per_s"])
    return top["candidate"], [
        f"{top['candidate']}: of the verdicts' recommendations, the best throughput"
    ]


def export_folder(
    target: str,
    store: Path,
    candidate: str | None,
    max_batch_size: int | None,
    latency_bound_ms: float | None,
) -> tuple[Path, list[str]]:
    """The export folder to serve, and what was chosen and why."""
    path = Path(target)
    if path.is_dir():
        if candidate is not None:
            raise UserError(
                f"{target} is an export folder: it serves its own candidate; drop --candidate"
            )
        return path, []
    from bakeoff import api, export

    record = api.show_run(target, store)
    refuse_generative(record, "bakeoff serve")
    run_id = record["run_id"]
    why: list[str] = []
    if candidate is None:
        candidate, why = choose_candidate(record, max_batch_size, latency_bound_ms)
    folder = RunFolder.of(store, run_id).path / "serve" / candidate
    if (folder / export.MANIFEST).is_file():
        why.append(f"exported before to {folder}")
    else:
        export.export(run_id, folder, candidate, store)
        why.append(f"exported to {folder}")
    return folder, why
