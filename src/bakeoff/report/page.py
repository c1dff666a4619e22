"""One report page for every kind of bake-off (inference, training, text
generation): the same head, style and policy, with each kind's sections.

The page fetches nothing: the charts are inline SVG, the style inline CSS, and its
own Content-Security-Policy refuses scripts, fonts, images and connections even if
a string slipped through. Every string a section holds is escaped by the section.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from bakeoff.report.data import StoredRun

__all__ = ["CSS", "cell", "definitions", "kind_page", "not_ok_list", "page"]

CSS = """
body { font-family: sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #2a7d2a; } .rejected { color: #a66a00; } .failed { color: #c62828; }
.unavailable { color: #777; } .flagged { color: #a66a00; font-weight: bold; }
.verdict { background: #f4f8f4; border-left: 4px solid #2ca02c; padding: 8px 12px; margin: 8px 0; }
.verdict.none { background: #fbf1f1; border-left-color: #c62828; }
.verdict.open { background: #fdf8ec; border-left-color: #a66a00; }
.verdict p.headline { margin: 0 0 4px 0; } .verdict ul { margin: 4px 0; }
.verdict details { font-size: 13px; color: #555; }
.card { display: grid; grid-template-columns: repeat(2, 1fr); gap: 12px; }
.card section { border: 1px solid #ddd; padding: 8px 12px; }
.card h3 { margin-top: 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0;
     font-size: 13px; }
dt { color: #555; } dd { margin: 0; }
.note { color: #555; font-size: 13px; }
svg.chart { display: block; margin: 8px 0; border: 1px solid #eee; max-width: 100%;
            height: auto; }
"""


def page(title: str, sections: list[tuple[str, str, str]], intro: str = "") -> str:
    """The whole HTML page: `title`, then `intro` (HTML), then each section as
    (id, heading, HTML) under its heading, in order."""
    body = "".join(
        f'<section id="section-{sid}"><h2>{escape(head)}</h2>{html}</section>'
        for sid, head, html in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>{intro}{body}</body></html>\n"
    )


def kind_page(
    run: StoredRun, title: str, sections: Callable[[dict[str, Any]], list[tuple[str, str, str]]]
) -> str:
    """A training or generative run's page: its `sections` of the document (those
    with something to show), or, for a run with no result, its status."""
    doc = run.document
    if doc is None:
        status = escape(str(run.record["status"]))
        return page(title, [], f"<p>Run status: {status}; it has no result.</p>")
    return page(title, [s for s in sections(doc) if s[2]])


def cell(value: Any) -> str:
    """A value as one Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def definitions(rows: dict[str, Any]) -> str:
    """Name and value pairs as an HTML definition list, escaped."""
    pairs = "".join(f"<dt>{escape(str(k))}</dt><dd>{escape(str(v))}</dd>" for k, v in rows.items())
    return f"<dl>{pairs}</dl>"


def not_ok_list(candidates: list[dict[str, Any]], when_none: str = "") -> str:
    """Each candidate that is not ok, with its status and why (`when_none` if none)."""
    items = [
        f"<li><b>{escape(str(c['id']))}</b> ({escape(str(c['status']))}): "
        f"{escape(str(c['reason']))}</li>"
        for c in candidates
        if c["status"] != "ok"
    ]
    return f"<ul>{''.join(items)}</ul>" if items else when_none
