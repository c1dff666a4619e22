"""`bakeoff report`: a stored run's HTML page or Markdown summary, each kind of
bake-off through its own sections (inference: html.py and markdown.py; training:
training.py; text generation: generation.py)."""

from __future__ import annotations

from pathlib import Path

from bakeoff.report import generation, html, markdown, training
from bakeoff.report.data import load

__all__ = ["FORMATS", "write"]

FORMATS = ("html", "md")


def write(run_id: str, store: str | Path, out: Path, fmt: str = "html") -> Path:
    """Render the stored run to `out` as `fmt` (html or md); returns the path."""
    run = load(run_id, store, generative=True)
    kind = run.settings.get("kind")
    if kind == "train":
        text = training.render(run) if fmt == "html" else training.markdown(run)
    elif kind == "generate":
        text = generation.render(run) if fmt == "html" else generation.markdown(run)
    else:
        text = html.render(run) if fmt == "html" else markdown.render(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
