"""A/A test: two identical ONNX Runtime FP32 candidates must come out tied.

Runs a workload with the same ONNX Runtime FP32 candidate twice under two
labels, `--repeats` times with `--quick`, and prints how often the verdict
called them tied (target: at least 19 of 20). The model is the built-in
digits CNN by default (fast to export); `--model minilm` uses MiniLM.
"""

from __future__ import annotations

import argparse
import tempfile
import textwrap
import time
from pathlib import Path

from bakeoff import api


def workload_file(folder: Path, model: str, batch_sizes: list[int]) -> Path:
    path = folder / "aa.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "aa-{model}"
            [model]
            kind = "builtin"
            name = "{model}"
            [search]
            batch_sizes = {batch_sizes}

            [[candidates]]
            label = "ort-a"
            runtime = "onnxruntime"
            precision = "fp32"

            [[candidates]]
            label = "ort-b"
            runtime = "onnxruntime"
            precision = "fp32"
            """
        )
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--model", default="digits", choices=["digits", "minilm"])
    parser.add_argument("--batch-sizes", default="1", help="comma-separated")
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    tied = total = 0
    with tempfile.TemporaryDirectory(prefix="bakeoff-aa-") as tmp:
        path = workload_file(Path(tmp), args.model, batch_sizes)
        for i in range(args.repeats):
            started = time.perf_counter()
            opts = api.RunOptions(quick=True, store=Path(tmp) / "bakeoff.db", seed=i)
            doc = api.run(str(path), opts).document
            for v in doc["verdicts"]:
                total += 1
                is_tied = any(len(group) == 2 for group in v["ties"])
                tied += is_tied
                ratio = v["speedup"]
                detail = (
                    f"{ratio['value']:.3f} [{ratio['ci95'][0]:.3f}-{ratio['ci95'][1]:.3f}]"
                    if ratio
                    else "-"
                )
                processes = "/".join(
                    str(c["latency_ms"]["processes"])
                    for c in doc["candidates"]
                    if c["batch_size"] == v["batch_size"] and c.get("latency_ms")
                )
                print(
                    f"run {i + 1:2d} batch {v['batch_size']}: "
                    f"{'tied' if is_tied else 'NOT TIED: ' + str(v['winner'])}; "
                    f"winner/baseline {detail}; processes {processes} "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
                if not is_tied:  # the winner is often the baseline itself: say why
                    print(f"    {v['reason']}", flush=True)
                    # What else the machine did meanwhile, and how each candidate stopped.
                    for g in doc["noise"].get("during", []):
                        if g["batch_size"] == v["batch_size"]:
                            print(
                                f"    others used {g['other_cores_mean']:.3f} cores on average "
                                f"(max {g['other_cores_max']:.3f}) over {g['rounds']} rounds",
                                flush=True,
                            )
                    for c in doc["candidates"]:
                        if c["batch_size"] == v["batch_size"] and c.get("latency_ms"):
                            lat = c["latency_ms"]
                            print(
                                f"    {c['id']}: {lat['rounds']} rounds in {lat['processes']} "
                                f"process(es), {c['validity']}; {c['stopped']}",
                                flush=True,
                            )
    print(f"tied in {tied} of {total} verdicts (target: at least 19 of 20, i.e. 95%)")
    print(f"fraction tied: {tied / max(total, 1):.2f}")


if __name__ == "__main__":
    main()
