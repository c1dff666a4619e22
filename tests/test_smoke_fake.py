from pathlib import Path

import numpy as np

from bakeoff import api


def test_fake_workload_end_to_end(tmp_path: Path, store_path: Path) -> None:
    np.savez(tmp_path / "d.npz", input=np.random.default_rng(0).random((64, 8), dtype=np.float32))
    (tmp_path / "w.toml").write_text(
        'name = "fake"\n[model]\nkind = "fake"\n'
        "options = { latency_ms = { fp32 = 2.0, int8 = 1.0 } }\n"
        '[data]\npath = "d.npz"\n[search]\nruntimes = ["fake"]\n'
    )
    result = api.run(str(tmp_path / "w.toml"), api.RunOptions(quick=True, store=store_path))
    assert result.exit_code == 0
    assert [v["winner"] for v in result.document["verdicts"]] == ["fake-int8-b1", "fake-int8-b32"]
