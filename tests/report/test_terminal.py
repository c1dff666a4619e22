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
