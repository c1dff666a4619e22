"""Data files bakeoff ships: `sentences.txt`, the texts of builtin:minilm and of a
Hugging Face text model given alone."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def sentences_path() -> Path:
    """The packaged sentences, one per line (bakeoff is installed as plain files)."""
    return Path(str(resources.files("bakeoff.data").joinpath("sentences.txt")))
