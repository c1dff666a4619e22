"""`bakeoff report`: the HTML page in headless Chromium, and the Markdown summary.

One real run (a tiny MLP on PyTorch and ONNX Runtime, --quick, a few seconds of
budget) feeds every test here. The browser test drives Debian's `chromium`
over the DevTools protocol on a pipe (stdlib only): it records console errors,
exceptions and every network request while the page loads, checks that each
chart is laid out with its marks on screen, and saves a full-page screenshot to
$BAKEOFF_TEST_OUTPUT (the Makefile's test-report sets test-output/) or tmp_path.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bakeoff import api
from browser import CHARTS_JS, CHROMIUM, TEXT_OUTSIDE_JS, DevTools
from extras import require_program
from tiny_mlp import TINY_MLP

# A name with markup in it: the report must show it as text, never run it.
NAME = "tiny <script>alert(1)</script> & co"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report")
    (root / "tiny_model.py").write_text(TINY_MLP)
    wl = root / "workload.toml"
    wl.write_text(
        f"name = {json.dumps(NAME)}\n"
        '[model]\nkind = "torch"\nfactory = "tiny_model:build"\n'
        '[data]\nfactory = "tiny_model:inputs"\n'
        '[quality]\nmetric = "cosine"\nmax_drop = 0.01\n'
        "[search]\nbatch_sizes = [1, 8]\n"
        # Hand-written candidates keep the run short: no PyTorch INT4 load, and an
        # unavailable one (torch.compile has no INT8 path on CPU) costs nothing.
        + "".join(
            f'[[candidates]]\nlabel = "{label}"\nruntime = "{rt}"\nprecision = "{p}"\n'
            for label, rt, p in (
                ("torch-fp32", "torch", "fp32"),
                ("ort-fp32", "onnxruntime", "fp32"),
                ("ort-int4", "onnxruntime", "int4"),
                ("compile-int8", "torch-compile", "int8"),
            )
        )
    )
    store = root / "store" / "bakeoff.db"
    with pytest.MonkeyPatch.context() as mp:
        # As on an AMD machine, whatever this one is: the advice must say nothing
        # about Intel hardware (see test_advice_in_the_report_is_true_of_this_machine).
        mp.setenv("BAKEOFF_CPU_VENDOR", "amd")
        result = api.run(str(wl), api.RunOptions(quick=True, store=store, budget_s=4))
    return {"root": root, "store": store, "run_id": result.run_id, "doc": result.document}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def _html(run: dict[str, Any]) -> Path:
    out = run["root"] / "report.html"
    if not out.exists():
        proc = _cli(
            "report", run["run_id"], "-o", str(out), "--store", str(run["store"]), cwd=run["root"]
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == str(out)
    return out


def test_html_is_self_contained_and_escaped(run: dict[str, Any]) -> None:
    text = _html(run).read_text()
    assert not re.search(r"https?://|//cdn|<script|<link|<img|<iframe|@import|url\(", text)
    assert "tiny &lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in text
    doc = run["doc"]
    for v in doc["verdicts"]:
        assert v["winner"] and v["winner"] in text
    for section in ("verdict", "quality-speed", "latency", "throughput", "resources", "size"):
        assert f'id="section-{section}"' in text
    for chart in (
        "chart-quality-speed-b1",
        "chart-quality-speed-b8",
        "chart-latency-b1",
        "chart-latency-b8",
        "chart-throughput",
        "chart-memory",
        "chart-cold-load",
        "chart-model-size",
    ):
        assert f'id="{chart}"' in text
    # every not-ok candidate is listed with its reason
    not_ok = [c for c in doc["candidates"] if c["status"] != "ok"]
    assert not_ok
    for c in not_ok:
        assert f'data-candidate="{c["id"]}"' in text
    # the environment card names the hardware, software, workload and method
    env = doc["environment"]
    for fact in (env["cpu"]["model"], env["python"], env["packages"]["onnxruntime"], "[64]"):
        assert fact in text
    assert "warm-up calls per candidate" in text
    # One unit system, rounded for people: sizes and memory in MiB, load averages to
    # the hundredth.
    assert "<th>peak MiB</th>" in text and "<th>size MiB</th>" in text
    assert not re.search(r"\bMB\b", re.sub(r"<[^>]+>", " ", text))
    assert re.search(r"load average \d+\.\d\d / \d+\.\d\d / \d+\.\d\d before", text)


def test_default_output_name_markdown_and_unknown_run(run: dict[str, Any], tmp_path: Path) -> None:
    store = str(run["store"])
    md = _cli("report", run["run_id"][:15], "--format", "md", "--store", store, cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    path = tmp_path / f"report-{run['run_id']}.md"
    assert md.stdout.strip() == path.name
    text = path.read_text()
    doc = run["doc"]
    for v in doc["verdicts"]:
        assert f"- **batch {v['batch_size']}** ({v['objective']}): {v['headline']}" in text
        for point in v["points"]:
            assert f"  - {point}" in text
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert sum(line.startswith("| `") for line in text.splitlines()) == len(ok)
    for c in doc["candidates"]:
        if c["status"] in ("unavailable", "failed"):
            assert f"`{c['id']}` {c['status']}:" in text
    assert doc["environment"]["cpu"]["model"] in text

    missing = _cli("report", "no-such-run", "--store", store, cwd=tmp_path)
    assert missing.returncode == 2
    assert "no run 'no-such-run'" in missing.stderr
    bad_format = _cli("report", run["run_id"], "--format", "pdf", "--store", store, cwd=tmp_path)
    assert bad_format.returncode == 2
    assert "--format" in bad_format.stderr


# A page whose one chart has a label past its right edge: the check above must see it.
_CLIPPED_PAGE = (
    "<!DOCTYPE html><html><body>"
    '<svg class="chart" id="chart-clipped" width="200" height="100" viewBox="0 0 200 100">'
    '<text x="10" y="30" font-size="11">inside</text>'
    '<text x="150" y="60" font-size="11">past the right edge</text></svg></body></html>'
)


@pytest.mark.browser
def test_report_renders_in_headless_chromium(run: dict[str, Any], tmp_path: Path) -> None:
    require_program(CHROMIUM, "apt-get install chromium (make browser)")
    page = _html(run)
    out_dir = Path(os.environ.get("BAKEOFF_TEST_OUTPUT") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    url = page.resolve().as_uri()
    chrome = DevTools(tmp_path / "profile")
    try:
        chrome.attach()
        clipped = tmp_path / "clipped.html"
        clipped.write_text(_CLIPPED_PAGE)
        chrome.call("Page.navigate", url=clipped.as_uri())
        chrome.wait_for("Page.loadEventFired")
        cut_off = chrome.evaluate(TEXT_OUTSIDE_JS)
        chrome.events.clear()  # what came before the report is not the report's
        chrome.call("Page.navigate", url=url)
        chrome.wait_for("Page.loadEventFired")
        charts = chrome.evaluate(CHARTS_JS)
        outside = chrome.evaluate(TEXT_OUTSIDE_JS)
        height = chrome.evaluate("document.documentElement.scrollHeight")
        chrome.call(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = chrome.call("Page.captureScreenshot", format="png")
        (out_dir / "report.png").write_bytes(base64.b64decode(shot["data"]))
        chrome.call("Runtime.evaluate", expression="0")  # drain events that are still due
    finally:
        chrome.close()

    errors = chrome.errors()
    assert errors == []
    requests = chrome.requests(url)
    assert requests == [url]  # the page itself, and nothing else

    assert cut_off == [{"chart": "chart-clipped", "text": "past the right edge"}]
    assert outside == []  # no label of the report runs past its chart

    by_id = {c["id"]: c for c in charts}
    doc = run["doc"]
    for bs in (1, 8):
        ok = [c for c in doc["candidates"] if c["batch_size"] == bs and c["status"] == "ok"]
        assert by_id[f"chart-quality-speed-b{bs}"]["marks"] == len(ok)
        assert by_id[f"chart-quality-speed-b{bs}"]["front"] == 1  # the winner, ringed
        # A front line where the caption speaks of one, and none where it says so.
        quality = by_id[f"chart-quality-speed-b{bs}"]
        assert quality["pareto"] == ("Dashed step line" in quality["caption"]), quality
        assert quality["pareto"] or "no front line to draw" in quality["caption"], quality
        assert by_id[f"chart-latency-b{bs}"]["marks"] == len(ok)
    ok_all = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert by_id["chart-throughput"]["marks"] == len(ok_all)
    assert by_id["chart-memory"]["marks"] == len(ok_all)
    for chart in charts:
        assert chart["width"] > 300 and chart["height"] > 100, chart
        assert chart["marks"] > 0 and chart["hit"] and chart["titled"], chart
    png = (out_dir / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_a_winning_baseline_is_not_called_faster_than_itself() -> None:
    import numpy as np

    from bakeoff.judge.verdict import Measured, decide
    from bakeoff.report.data import StoredRun
    from bakeoff.report.markdown import render

    def timed(cid: str, seed: int) -> Measured:
        ns = (1e6 * np.random.default_rng(seed).lognormal(0, 0.05, (12, 30))).astype(np.int64)
        return Measured(cid, ns, ns.sum(axis=1), 1)

    v = decide(1, "latency", [timed("torch-fp32-b1", 1), timed("onnxruntime-fp32-b1", 2)], "")
    verdict = decide(
        1, "latency", [timed("torch-fp32-b1", 1), timed("onnxruntime-fp32-b1", 2)], v.winner
    ).to_dict()
    assert verdict["standing"] == "baseline-leads"
    doc = {"workload": {"name": "w"}, "verdicts": [verdict], "candidates": []}
    run = StoredRun(
        {"run_id": "r", "status": "done", "document": doc, "environment": {}, "settings": {}}
    )
    text = render(run)
    assert f"(latency): No candidate beat the baseline {v.winner}: it leads" in text
    [line] = [ln for ln in text.splitlines() if ln.startswith("- **batch 1**")]
    assert "×" not in line and "over the baseline" not in text  # no speedup claimed
    # A run stored before verdicts had a headline shows its reason as it was.
    old = {k: verdict[k] for k in ("batch_size", "objective", "winner", "baseline", "ties")}
    doc["verdicts"] = [{**old, "reason": "At batch 1, x has the best p50 latency."}]
    assert "(latency): At batch 1, x has the best p50 latency." in render(run)


def test_a_noisy_result_is_flagged_in_every_report(run: dict[str, Any]) -> None:
    """Rule 10: a result over a gate is shown as such, not printed as if fine."""
    from rich.console import Console

    from bakeoff.report import html, markdown
    from bakeoff.report.data import StoredRun, flagged, load
    from bakeoff.report.terminal import print_result

    stored = load(run["run_id"], run["store"])
    assert stored.document is not None
    doc = json.loads(json.dumps(stored.document))
    shaky = next(c for c in doc["candidates"] if c["status"] == "ok")
    why = "other processes used 0.80 cores on average meanwhile (gate 0.25): not quiet"
    shaky["validity"], shaky["validity_reason"] = "noisy", why
    flagged_run = StoredRun({**stored.record, "document": doc}, stored.rounds)
    console = Console(record=True, width=250)
    print_result(doc, console)
    shown = console.export_text()
    assert "ok, noisy" in shown and f"{shaky['id']}: noisy - {why}" in shown
    star = " ★" if shaky["id"] in {v["winner"] for v in doc["verdicts"]} else ""
    md = markdown.render(flagged_run)
    assert f"| `{shaky['id']}`{star} | ok, noisy |" in md
    assert f"- `{shaky['id']}` noisy: {why}" in md
    page = html.render(flagged_run)
    assert '<span class="flagged">ok, noisy</span>' in page and why in page
    # The section is there only when something is flagged.
    print_result(stored.document, console := Console(record=True, width=250))
    assert ("Flagged" in console.export_text()) == bool(flagged(stored.candidates))


def test_an_unfinished_run_is_reported_as_unfinished(run: dict[str, Any]) -> None:
    from bakeoff.report import html, markdown
    from bakeoff.report.data import StoredRun, load

    stored = load(run["run_id"], run["store"])
    assert stored.document is not None
    pending = [{**c, "status": "pending", "reason": ""} for c in stored.document["candidates"]]
    record = {**stored.record, "status": "interrupted", "document": None, "candidates": pending}
    page = html.render(StoredRun(record))
    rid = run["run_id"]
    assert f"Run {rid} is interrupted: it has no verdict." in page
    assert f"<code>bakeoff run --resume {rid}</code> finishes it" in page
    assert f"{len(pending)} candidates had not finished when the run stopped" in page
    assert "Every candidate was measured" not in page
    md = markdown.render(StoredRun(record))
    assert f"Run status: **interrupted**; no verdict. `bakeoff run --resume {rid}`" in md
    # Read from a store of its own, the command names that store, or it would not work.
    elsewhere = StoredRun(record, store=Path(run["store"]))
    command = f"bakeoff run --resume {rid} --store {run['store']}"
    assert f"<code>{command}</code> finishes it" in html.render(elsewhere)
    assert f"`{command}` finishes it" in markdown.render(elsewhere)


def test_advice_in_the_report_is_true_of_this_machine(run: dict[str, Any]) -> None:
    """Run with a simulated AMD vendor: no "Intel hardware" claim anywhere, and every
    piece of advice the run did not measure says who left it out and why."""
    from rich.console import Console

    from bakeoff.report import html
    from bakeoff.report.data import load
    from bakeoff.report.terminal import print_result

    doc = run["doc"]
    assert doc["environment"]["cpu"]["vendor"] == "AMD"
    assert doc["environment"]["cpu"]["vendor_simulated"] == "amd"
    page = html.render(load(run["run_id"], run["store"]))
    console = Console(record=True, width=300)
    print_result(doc, console)
    shown = console.export_text()
    for text in (page, shown, json.dumps(doc)):
        assert "Intel hardware" not in text and "this Intel CPU" not in text
    assert "OpenVINO as a candidate on this AMD CPU" in page
    advice = [a for a in doc["advice"]["advice"] if a.get("confirm")]
    unmeasured = [a for a in advice if a["confirmed"] is None]
    assert unmeasured  # the hand-written candidates leave OpenVINO and INT8 out
    who = ("by the advice", "by you", "by the workload", "by the defaults", "could not be")
    for a in unmeasured:
        assert any(w in a["why"] for w in who), a
        assert f"<td>{html._e(a['why'])}</td>" in page
    ov = next(a for a in advice if a["id"] == "openvino-server-cpu")
    assert ov["why"] == "left out by the workload: its [[candidates]] include no openvino fp32"
