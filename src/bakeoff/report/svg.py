"""matplotlib's SVG, made fit to inline in the HTML report.

The report must open anywhere without a network and without scripts, so each
chart is an SVG drawn by matplotlib (which chooses the ticks, formats the
numbers and lays the labels out so none runs off the chart) and then tidied
here: no XML declaration or DOCTYPE, no namespace declarations, no metadata, no
page-wide `<style>`, no clip paths (marks are drawn unclipped; the axes' limits
hold them), text kept as `<text>` in DejaVu Sans, and only ids that something
refers to (salted per chart, so several charts can share one page). Every chart is an
`<svg class="chart" id=...>` with a `<title>`; every plotted mark is a group
with a class and a `<title>` that shows its label and values on hover (see `Marks`).

matplotlib is imported inside `figure`: only `bakeoff report` needs it.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

WIDTH = 720  # px on screen: the page is at most 1100 px wide
GRID = "#e6e6e6"

_SVG = "http://www.w3.org/2000/svg"
_XLINK = "http://www.w3.org/1999/xlink"
_PT = 72.0  # matplotlib's SVG user unit is the point; at 72 dpi one point is one px


@dataclass
class Marks:
    """Marks drawn with gid `{prefix}{n}`: each becomes `<g class=...><title>...`.

    The classes the charts give them: `point`, `box`, `bar`, `line`, `ci`,
    `pareto-front`, `winner-ring`, so tests can count what was drawn."""

    prefix: str
    items: list[tuple[str, str]]

    def add(self, cls: str, tip: str) -> str:
        self.items.append((cls, tip))
        return f"{self.prefix}{len(self.items) - 1}"


@contextmanager
def figure(
    chart_id: str, height_px: float, width_px: float = WIDTH
) -> Iterator[tuple[Figure, Axes, Marks]]:
    """A figure in the report's style with one axes, and the marks drawn into it."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    settings: dict[RcKeyType, Any] = {
        "svg.fonttype": "none",  # text stays <text>, selectable and searchable
        "svg.hashsalt": chart_id,  # marker ids differ between charts on one page
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans"],
        "font.size": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.axisbelow": True,
        "axes.edgecolor": "#333333",
        "axes.labelcolor": "#222222",
        "xtick.color": "#333333",
        "ytick.color": "#333333",
        "legend.frameon": False,
        "legend.fontsize": 10,
    }
    with matplotlib.rc_context(settings):
        layout = ConstrainedLayoutEngine(w_pad=4 / _PT, h_pad=4 / _PT)
        fig = Figure(figsize=(width_px / _PT, height_px / _PT), dpi=_PT, layout=layout)
        ax = fig.add_subplot()
        # Unclipped grid lines (the default clips them to the axes with a url(#...)).
        ax.grid(True, color=GRID, linewidth=0.8, clip_on=False)
        yield fig, ax, Marks(f"{chart_id}-mark-", [])


def point(
    ax: Axes, marks: Marks, cls: str, tip: str, x: float, y: float, zorder: float = 3, **style: Any
) -> None:
    """One marker at (x, y) with no line, a mark of class `cls` that shows `tip` on
    hover; unclipped, as every mark (the page has no clip paths), above the lines."""
    ax.plot(
        [x], [y], linestyle="none", zorder=zorder, clip_on=False, gid=marks.add(cls, tip), **style
    )


def to_svg(fig: Figure, chart_id: str, title: str, marks: Marks) -> str:
    """The figure as an SVG element to inline, its marks grouped with their titles."""
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight", pad_inches=0.05)
    return tidy_svg(buf.getvalue(), chart_id, title, marks.prefix, marks.items)


def tidy_svg(
    raw: bytes, chart_id: str, title: str, prefix: str, marks: Sequence[tuple[str, str]]
) -> str:
    """matplotlib's SVG, made fit to inline in the report (see the module's doc)."""
    # The XML declaration and DOCTYPE go with the parse: the element is written alone.
    root = ET.fromstring(raw)
    # Inline in HTML an <svg> needs no namespace declarations (which would put the
    # namespaces' http:// names in a page that has no URL), and <use> takes plain
    # href: written without namespaces, the markup has neither xmlns nor ns0: prefixes.
    for el in root.iter():
        el.tag = el.tag.removeprefix(f"{{{_SVG}}}")
        if f"{{{_XLINK}}}href" in el.attrib:
            el.set("href", el.attrib.pop(f"{{{_XLINK}}}href"))
    parents = {child: parent for parent in root.iter() for child in parent}
    for el in list(root.iter()):
        if el.tag in ("metadata", "style"):
            parents[el].remove(el)
    for el in list(root.iter("defs")):
        if not len(el):
            parents[el].remove(el)
    # What the dropped page-wide `*{...}` style said, inherited from the root instead.
    root.set("stroke-linejoin", "round")
    root.set("stroke-linecap", "butt")

    # Each mark's parts (its gid'd groups) into one <g class=...> with a <title>.
    parts: dict[str, list[ET.Element]] = {}
    for el in root.iter():
        gid = el.get("id", "")
        if gid.startswith(prefix):
            parts.setdefault(gid, []).append(el)
    for n, (cls, tip) in enumerate(marks):
        found = parts.get(f"{prefix}{n}", [])
        if not found:
            continue
        holder = parents[found[0]]
        group = ET.Element("g", {"class": cls})
        ET.SubElement(group, "title").text = tip
        holder.insert(list(holder).index(found[0]), group)
        for el in found:
            parents[el].remove(el)
            del el.attrib["id"]
            group.append(el)
            parents[el] = group

    # Only ids something refers to stay (markers, salted per chart): matplotlib's
    # figure_1, axes_1, line2d_3 ... would repeat in every chart of the page.
    referenced: set[str] = set()
    for el in root.iter():
        for key, value in el.attrib.items():
            if key == "href" and value.startswith("#"):
                referenced.add(value[1:])
            referenced.update(re.findall(r"url\(#([^)]+)\)", value))
    for el in root.iter():
        if el is not root and "id" in el.attrib and el.attrib["id"] not in referenced:
            del el.attrib["id"]

    _, _, w, h = (float(v) for v in root.attrib["viewBox"].split())
    root.attrib.pop("version", None)
    root.set("class", "chart")
    root.set("id", chart_id)
    root.set("width", f"{w:.0f}")
    root.set("height", f"{h:.0f}")
    root.set("role", "img")
    root.set("aria-label", title)
    heading = ET.Element("title")
    heading.text = title
    root.insert(0, heading)
    return ET.tostring(root, encoding="unicode")
