"""Rich output: a live progress view and candidate table while working, and the
final table with the verdicts in words."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from bakeoff.candidates import Candidate
from bakeoff.efficiency import percent
from bakeoff.judge.verdict_words import pick_quality, statement
from bakeoff.report.charts import num
from bakeoff.report.data import flagged, leaders, status_label
from bakeoff.report.fit import fitted
from bakeoff.workload.generated import GENERATED_NOTE

_STATUS_STYLE = {
    "ok": "green",
    "pending": "dim",
    "rejected": "yellow",
    "failed": "red",
    "unavailable": "dim",
}


# How the verdict's first sentence is coloured by its standing (verdict.STANDINGS).
_VERDICT_STYLE = {
    "clear": "green",
    "leads": "green",
    "baseline-leads": "green",
    "no-baseline": "yellow",
    "baseline-tied": "yellow",
}


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _live_table(candidates: list[Candidate]) -> Table:
    t = Table(expand=False, show_edge=False, pad_edge=False)
    for col in ("candidate", "status", "quality", "load s", "rounds", "p50 ms"):
        t.add_column(col)
    for c in candidates:
        if c.status == "unavailable":
            continue
        samples = c.samples()
        p50 = float(np.median(samples)) / 1e6 if samples.size else None
        t.add_row(
            c.id,
            f"[{_STATUS_STYLE.get(c.status, '')}]{c.status}[/]",
            "-" if c.quality is None else f"{c.quality.value:.4f}",
            _fmt(c.load_s),
            str(len(c.rounds_ns)),
            "-" if p50 is None else num(p50),
        )
    return t


class RichReporter:
    """Progress bars and a live table; everything goes to stderr-safe Rich console."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress_bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.stage_text = "starting"
        self.tasks: dict[str, Any] = {}
        self._candidates: list[Candidate] = []
        self.started = time.perf_counter()
        # No auto-refresh: a render thread would take CPU from the worker being
        # timed. The view is redrawn on events, which arrive between timed blocks.
        self.live = Live(self._render(), console=self.console, auto_refresh=False, transient=True)

    def __enter__(self) -> RichReporter:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def _render(self) -> Group:
        elapsed = time.perf_counter() - self.started
        stage = Text(f"{self.stage_text}  ({elapsed:.0f} s)", style="bold")
        return Group(
            stage, self.progress_bar, fitted(_live_table(self._candidates), self.console.width)
        )

    def stage(self, text: str) -> None:
        if not self.console.is_terminal:
            # Logs and CI have no live view: say each step on its own line instead.
            elapsed = time.perf_counter() - self.started
            self.console.print(f"[{elapsed:6.1f} s] {text}", markup=False, highlight=False)
            return
        self.stage_text = text
        self.live.update(self._render(), refresh=True)

    def progress(self, task: str, done: int, total: int) -> None:
        if not self.console.is_terminal:
            return
        if task not in self.tasks:
            self.tasks[task] = self.progress_bar.add_task(task, total=total)
        self.progress_bar.update(self.tasks[task], completed=done, total=total)

    def candidates(self, candidates: list[Candidate]) -> None:
        self._candidates = candidates
        if self.console.is_terminal:
            self.live.update(self._render(), refresh=True)


def _sig(x: float | None) -> str:
    """Three significant figures: a 0.9 ms first call is not "0.00" s."""
    return "-" if x is None else num(x)


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{num(ci[0])}-{num(ci[1])}]"


def _of_peak(c: dict[str, Any]) -> str:
    """The fraction of this machine's GEMM peak its throughput reached."""
    eff = c.get("efficiency")
    return "-" if not eff else percent(eff["fraction"])


def results_table(document: dict[str, Any]) -> Table:
    t = Table(title=f"bakeoff {document['run_id']} - {document['workload']['name']}")
    # A document from before issue 19 has no efficiency figures: its table stays as it was.
    with_peak = any("efficiency" in c for c in document["candidates"])
    for col, justify in (
        ("candidate", "left"),
        ("status", "left"),
        ("quality", "right"),
        ("p50 ms [95% CI]", "right"),
        ("p99 ms", "right"),
        ("samples/s [95% CI]", "right"),
        *((("% of peak", "right"),) if with_peak else ()),
        ("peak MiB", "right"),
        ("size MiB", "right"),
        ("load s", "right"),
        ("1st call s", "right"),
    ):
        t.add_column(col, justify=justify)
    led = leaders(document["verdicts"])
    for c in document["candidates"]:
        lat, thr, q = c["latency_ms"], c["throughput"], c["quality"]
        # escape: a hand-written label is the user's text, not Rich markup
        name = escape(c["id"])
        if c["id"] in led:
            name = f"[bold]{name} {'*' if led[c['id']] else '~'}[/]"
        label = status_label(c)
        style = "yellow" if label != c["status"] else _STATUS_STYLE.get(c["status"], "")
        status = f"[{style}]{label}[/]"
        p99 = "-"
        if lat:
            p99 = num(lat["p99"]) + ("?" if "p99" in lat["unsupported"] else "")
        t.add_row(
            name,
            status,
            "-" if q is None else f"{q['value']:.4f}",
            "-" if not lat else f"{num(lat['p50'])}{_ci(lat['ci95']['p50'])}",
            p99,
            "-" if not thr else f"{num(thr['samples_per_s'])}{_ci(thr['ci95'])}",
            *((_of_peak(c),) if with_peak else ()),
            _fmt(c["peak_rss_mb"], 0),
            _sig(c.get("model_size_mb")),
            _cold(c, "load"),
            _cold(c, "first_call"),
        )
    return t


def _cold(c: dict[str, Any], key: str) -> str:
    """A load or first-call figure, with † where it is no cold start measured alone."""
    cold = c["cold_start_s"]
    return _sig(cold[key]) + ("†" if cold.get("isolated") is False else "")


def _listing(console: Console, title: str, lines: dict[str, str]) -> None:
    """A titled list of candidates with one line of (markup) text each; none: nothing."""
    if lines:
        console.print("\n" + title)
        for cid, text in lines.items():
            console.print(f"  {escape(cid)}: {text}", highlight=False)


def print_any_kind(document: dict[str, Any], console: Console) -> None:
    """A run of a kind of bake-off this command has no table for: what every kind's
    document has, its candidates (id, status, why) and its verdicts' headlines."""
    table = Table(title=f"bakeoff {document['run_id']} ({document.get('kind')})")
    table.add_column("candidate", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("why")
    for c in document["candidates"]:
        table.add_row(escape(c["id"]), escape(c["status"]), escape(c.get("reason") or ""))
    console.print(fitted(table, console.width))
    console.print("[bold]Verdict[/]")
    for v in document.get("verdicts") or []:
        console.print(f"  {escape(v.get('headline') or v.get('reason') or '')}", highlight=False)


def print_result(document: dict[str, Any], console: Console | None = None) -> None:
    """The final table, then each section that has something to say, the verdicts
    and the advice among them, and what the run took."""
    console = console or Console()
    candidates = document["candidates"]
    console.print(fitted(results_table(document), console.width))
    console.print(
        "[dim]* winner; ~ leads, but not separated (see the verdict); ? marks a p99 with "
        "too few samples to support it[/]"
    )
    # Right under the legend: "of the load time" reads on from the load s column.
    _in_load(console, candidates)
    _not_alone(console, candidates)
    if any(c.get("efficiency") for c in candidates):
        console.print(
            "[dim]% of peak: the model's GEMM FLOPs (counted in its ONNX graph) at the "
            "measured samples/s, over this machine's GEMM peak at the same threads and "
            "precision[/]"
        )
    _cold_starts(console, candidates)
    _flags_and_notes(console, candidates)
    _not_ok(console, candidates)
    _server(console, candidates)
    _offline(console, candidates)
    _verdicts(console, document["verdicts"], candidates)
    if document["workload"].get("inputs") == "generated":
        console.print(f"  [yellow]{escape(GENERATED_NOTE)}[/]", highlight=False)
    _advice(console, document)
    _listing(
        console,
        "[bold]Left out[/] (not built: the advice, or another variant, made them unnecessary)",
        {
            vid: escape(why)
            for vid, why in (document.get("settings", {}).get("left_out") or {}).items()
        },
    )
    _took(console, document)


def _in_load(console: Console, candidates: list[dict[str, Any]]) -> None:
    """What the load times include: each runtime's imports, and ahead-of-time compiles."""
    in_load = []
    imports: dict[str, list[float]] = {}
    for c in candidates:
        if c["cold_start_s"].get("import") is not None:
            imports.setdefault(c["runtime"], []).append(c["cold_start_s"]["import"])
    if imports:
        # Mostly the runtime's own libraries: one figure per runtime says it.
        in_load.append(
            "imports "
            + ", ".join(f"{rt} {num(float(np.median(v)))} s" for rt, v in imports.items())
        )
    compiled = [c for c in candidates if c["cold_start_s"].get("compile") is not None]
    if compiled:
        # Ahead-of-time compilation (jax.jit, XLA, TVM, TensorRT) happens while loading:
        # part of the cold start, never of the latency above.
        in_load.append(
            "compile "
            + ", ".join(f"{c['id']} {c['cold_start_s']['compile']:.3g} s" for c in compiled)
        )
    if in_load:
        console.print(
            "[dim]of the load time (never in latency): " + "; ".join(in_load) + "[/]",
            highlight=False,
        )


def _not_alone(console: Console, candidates: list[dict[str, Any]]) -> None:
    """Why some load and first-call figures carry a †, and how to get ones that don't."""
    why = {
        c["cold_start_s"]["not_isolated"]
        for c in candidates
        if c["cold_start_s"].get("isolated") is False
    }
    if not why:
        return
    shared = any("same process" in w for w in why)
    side = any("beside" in w for w in why)
    parts = ["a later batch size's first call came in its variant's worker"] if shared else []
    parts += ["workers loaded side by side"] if side else []
    console.print(
        "[dim]† no cold start measured alone ("
        + "; ".join(parts)
        + "): --cold-starts N measures N fresh processes one at a time, "
        "--worker-per-batch-size loads each candidate alone[/]",
        highlight=False,
    )


def _cold_starts(console: Console, candidates: list[dict[str, Any]]) -> None:
    """Cold starts measured in several fresh processes, with their CIs."""
    repeated = [c for c in candidates if c["cold_start_s"].get("repeats", 1) > 1]
    if not repeated:
        return
    cold = repeated[0]["cold_start_s"]["repeats"]
    console.print(f"\n[bold]Cold start[/] (mean of {cold} fresh processes, 95% CI)")
    for c in repeated:
        cs = c["cold_start_s"]
        lo, hi = cs["load_ci95"]
        flo, fhi = cs["first_call_ci95"]
        imported = ""
        if "import_ci95" in cs:
            ilo, ihi = cs["import_ci95"]
            imported = f" (imports {num(cs['import'])} s [{num(ilo)}-{num(ihi)}])"
        console.print(
            f"  {escape(c['id'])}: load {num(cs['load'])} s [{num(lo)}-{num(hi)}]{imported}, "
            f"first call {num(cs['first_call'])} s [{num(flo)}-{num(fhi)}]",
            highlight=False,
        )


def _flags_and_notes(console: Console, candidates: list[dict[str, Any]]) -> None:
    """Measured candidates to read with care: flagged, beyond the constraints, or noted."""
    _listing(
        console,
        "[bold]Flagged[/] (measured, but not to be taken as it is)",
        {
            c["id"]: f"[yellow]{c['validity']}[/] - {escape(c['validity_reason'])}"
            for c in flagged(candidates)
        },
    )
    _listing(
        console,
        "[bold]Measured, but beyond the workload's constraints[/] (not eligible)",
        {
            c["id"]: escape("; ".join(c["constraint_violations"]))
            for c in candidates
            if c.get("constraint_violations")
        },
    )
    _listing(
        console,
        "[bold]Notes[/] (measured as asked; read the figures with this in mind)",
        {
            c["id"]: escape("; ".join(c["notes"]))
            for c in candidates
            if c.get("notes") and c["status"] in ("ok", "rejected")
        },
    )


def _not_ok(console: Console, candidates: list[dict[str, Any]]) -> None:
    not_ok = [c for c in candidates if c["status"] not in ("ok",)]
    if not_ok:
        console.print("\n[bold]Not measured or not eligible[/]")
        for c in not_ok:
            style = _STATUS_STYLE[c["status"]]
            console.print(f"  {c['id']}: [{style}]{c['status']}[/] - {escape(c['reason'])}")


def _server(console: Console, candidates: list[dict[str, Any]]) -> None:
    """The server scenario: per candidate, the highest rate that kept p99 within the bound."""
    served = [c for c in candidates if c.get("server")]
    if not served:
        return
    bound = next((c["server"].get("bound_ms") for c in served), None)
    console.print(f"\n[bold]Server scenario[/] (Poisson arrivals, p99 bound {bound} ms)")
    for c in served:
        srv = c["server"]
        if srv.get("error"):
            console.print(f"  {c['id']}: [red]failed[/] - {escape(srv['error'])}")
        elif srv.get("max_qps") is None:
            console.print(f"  {c['id']}: no tried rate kept p99 within {srv['bound_ms']} ms")
        else:
            console.print(
                f"  {c['id']}: highest passing rate {srv['max_qps']:.1f} queries/s, "
                f"p99 {srv['p99_ms_at_max']:.1f} ms (bound {srv['bound_ms']:g} ms, "
                f"{len(srv['tries'])} rates tried)"
            )


def _offline(console: Console, candidates: list[dict[str, Any]]) -> None:
    """The offline scenario: each candidate's concurrency sweep, then the best of all."""
    offline = [c for c in candidates if c.get("offline")]
    if not offline:
        return
    console.print("\n[bold]Offline scenario[/] (every sample issued at once, LoadGen)")
    for c in offline:
        runs = ", ".join(
            f"{t['concurrency']}x{t['threads_per_stream']}t: "
            + (f"{t['samples_per_s']:.1f}/s" if t.get("samples_per_s") else "failed")
            for t in c["offline"]["sweep"]
        )
        console.print(f"  {c['id']}: {runs}")
    best = max(
        (c for c in offline if c["offline"].get("best")),
        key=lambda c: c["offline"]["best"]["samples_per_s"],
        default=None,
    )
    if best is not None:
        b = best["offline"]["best"]
        console.print(
            f"  highest: {best['id']} at {b['samples_per_s']:.1f} samples/s "
            f"(batch {best['batch_size']}, {b['concurrency']} stream(s) x "
            f"{b['threads_per_stream']} thread(s))"
        )


def _verdicts(
    console: Console, verdicts: list[dict[str, Any]], candidates: list[dict[str, Any]]
) -> None:
    console.print("\n[bold]Verdict[/]")
    for v in verdicts:
        head, points, _ = statement(v)
        quality = pick_quality(v, candidates)
        points = [quality, *points] if quality else points
        style = _VERDICT_STYLE.get(v.get("standing") or "clear", "") if v["winner"] else "red"
        console.print(
            f"  [bold]batch {v['batch_size']} ({v['objective']}):[/] [{style}]{escape(head)}[/]",
            highlight=False,
        )
        for point in points:
            console.print(f"    - {escape(point)}", highlight=False)


def _advice(console: Console, document: dict[str, Any]) -> None:
    """Each piece of advice the run could check, and whether the measurement confirmed it."""
    advice = document.get("advice")
    if not advice:
        return
    source = document.get("settings", {}).get("candidates_from", "-")
    console.print(f"\n[bold]Advice[/] for target {advice['target']} (candidates from: {source})")
    # The advice, then what the run measured of it: the measurement speaks, the mark
    # says which way (✓ it held, ✗ it did not, - nothing here measured it).
    marks = {True: "[green]✓[/]", False: "[yellow]✗[/]"}
    for a in advice["advice"]:
        if a.get("confirm") is None:
            if a.get("excludes"):  # what it left out of the grid (BF16 without native BF16)
                console.print(f"  [dim]-[/] {escape(a['text'])}: {escape(a['reason'])}")
            continue  # other text-only advice: shown by `bakeoff advise` and in the JSON
        mark = marks.get(a.get("confirmed"), "[dim]-[/]")
        console.print(f"  {mark} {escape(a['text'])}: {escape(a['why'])}", highlight=False)


def _took(console: Console, document: dict[str, Any]) -> None:
    """What the run took, by phase, and what the variant cache saved."""
    timing = document.get("timing_s")
    if timing:
        console.print(
            f"\n[dim]run {document['run_id']}: build {timing['build']:.0f} s"
            + (
                f" (the reference's outputs {timing['reference']:.0f} s of it, side by side)"
                if timing.get("reference_beside_builds")
                else f", reference {timing['reference']:.0f} s"
            )
            + f", measure {timing['measure']:.0f} s, total {timing['total']:.0f} s[/]"
        )
    vc = document.get("variant_cache")
    if vc and vc.get("variants"):
        console.print(
            f"[dim]variant cache: {vc['reused']} of {vc['variants']} variants reused, "
            f"{vc['saved_s']:.1f} s of building saved[/]"
        )
