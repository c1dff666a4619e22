"""`bakeoff train --tensorboard DIR`: each stack's seeds as TensorBoard runs
(`DIR/<run_id>/<stack>/seed<k>`), written from the result document with PyTorch's
own writer: the training loss at every step, the validation metric at every
evaluation."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from bakeoff.errors import UserError

INSTALL = "pip install 'bakeoff[train]'"


def check_available() -> None:
    """Before anything trains: the writer needs the tensorboard package."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError(f"--tensorboard needs the tensorboard package: {INSTALL}")


def write(doc: dict[str, Any], root: Path) -> list[Path]:
    """One event-file run per stack and seed; returns their folders."""
    from torch.utils.tensorboard import SummaryWriter

    metric = doc["workload"]["target"]["metric"]
    folders = []
    for c in doc["candidates"]:
        for seed in c["seeds"]:
            folder = root / doc["run_id"] / c["id"] / f"seed{seed['seed']}"
            writer = SummaryWriter(log_dir=str(folder))
            try:
                for step, loss in enumerate(seed["losses"], start=1):
                    writer.add_scalar("train/loss", loss, step)
                for step, value, train_s in seed["evals"]:
                    writer.add_scalar(f"validation/{metric}", value, int(step))
                    writer.add_scalar("validation/train_seconds", train_s, int(step))
            finally:
                writer.close()
            folders.append(folder)
    return folders
