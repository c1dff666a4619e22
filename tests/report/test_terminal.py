"""Every table `run`, `show`, `ls` and `compare` print fits 80, 100 and 120 columns
with every run and candidate id whole (the train, generative and `cache ls` tables
are checked beside their runs in test_train, test_generation_run and
test_cache_export)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from bakeoff.report.terminal import print_result
from fake_workload import write_fake_workload
from front_door import call
from widths import WIDTHS, assert_fits, printed_at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_results_of_a_real_run_fit_with_every_id_whole(width: int) -> None:
    doc = json.loads((FIXTURES / "digits_quick_document.json").read_text())
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    print_result(doc, console)
    assert_fits(
        console.export_text(), width, [doc["run_id"], *(c["id"] for c in doc["candidates"])]
    )


def test_ls_show_and_compare_fit_with_every_id_whole(tmp_path: Path) -> None:
    # Labels as long as the longest real candidate ids (`torch-compile-bf16-autocast-b32`).
    workload = write_fake_workload(
        tmp_path,
        "a-workload-with-a-long-name",
        '[[candidates]]\nruntime = "fake"\nprecision = "fp32"\n'
        'label = "fake-compile-fp32-autocast-long"\n'
        '[[candidates]]\nruntime = "fake"\nprecision = "int8"\n'
        'label = "fake-compile-int8-autocast-long"\n',
    )
    store = str(tmp_path / "s.db")
    runs = []
    for i in range(2):
        doc = tmp_path / f"r{i}.json"
        done = call("run", str(workload), "--quick", "--store", store, "--json", str(doc))
        assert done.code == 0, done.stderr
        runs.append(json.loads(doc.read_text()))
    ids = [c["id"] for c in runs[0]["candidates"]]
    assert any(len(i) >= 30 for i in ids), ids
    run_ids = [r["run_id"] for r in runs]
    for width in WIDTHS:
        for argv, expected in [
            (("ls",), run_ids),
            (("show", run_ids[0]), [run_ids[0], *ids]),
            (("compare", *run_ids), ids),
        ]:
            shown = printed_at(width, lambda argv=argv: call(*argv, "--store", store).stdout)
            assert_fits(shown, width, expected)


def test_what_the_advice_left_out_of_the_grid_is_said_with_the_results() -> None:
    """On a CPU without native BF16 the default grid has no BF16: the run says so
    where it shows the advice, not only `bakeoff advise` and the JSON."""
    doc = json.loads((FIXTURES / "digits_quick_document.json").read_text())
    left_out = {
        "id": "cpu-bf16",
        "text": "BF16 is left out of the default grid: this CPU has no native BF16",
        "reason": "without it BF16 is emulated, usually slower than FP32",
        "excludes": [["bf16", "left out of the default grid"]],
        "confirm": None,
        "confirmed": None,
        "why": "nothing a run measures",
    }
    plain = {**left_out, "id": "words", "text": "Words alone", "excludes": []}
    doc["advice"] = {**(doc.get("advice") or {"target": "server-cpu"}), "advice": [left_out, plain]}
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    print_result(doc, console)
    text = console.export_text()
    assert "- BF16 is left out of the default grid: this CPU has no native BF16: without it" in text
    assert "Words alone" not in text
