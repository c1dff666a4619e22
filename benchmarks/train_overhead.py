"""What bakeoff's training worker costs per step over a bare PyTorch loop.

The same model (the digits CNN of `builtin:digits-train`), initial weights, data
order, optimizer and threads, in two processes started alike: bakeoff's
`TrainJob` worker, answering the trial engine's `Measure` commands, and a bare
loop (`zero_grad`, forward, loss, backward, step on the next batch) written here.
They are timed in turns, one process at a time, and the ratio of their per-step
times is printed per turn and as the median of the turns (target: at most 1.02).
With Lightning installed, a third process takes its turns too: bakeoff's
`lightning` stack, the same recipe through `Trainer.fit` (its ratio to the bare
loop is Lightning's overhead, plus the worker's, printed above it).

    python benchmarks/train_overhead.py [--turns 7] [--steps 400]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bakeoff import environment
from bakeoff.stacks.spec import TrainSpec
from bakeoff.training.messages import TrainJob
from bakeoff.trials.jobs import Exit, Measure, Warmup
from bakeoff.trials.launcher import LocalLauncher, worker_env

# The bare loop: no bakeoff code in the timed part, only the data order's indices
# (read from the same generator, so both processes see the same batches).
BARE = """
import json, sys, time
import numpy as np, torch
from safetensors.torch import load_file
from bakeoff import stacks
from bakeoff.builtins import digits

spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
data = np.load(spec["data_path"])
x, y = torch.from_numpy(data["x_train"]), torch.from_numpy(data["y_train"])
model = digits.untrained()
model.load_state_dict(load_file(spec["init_path"]))
model.train()
opt = torch.optim.Adam(model.parameters(), lr=spec["lr"])
order = stacks.batches(len(y), spec["batch_size"], spec["seed"])

def steps(n):
    t0 = time.perf_counter()
    for _ in range(n):
        idx = torch.from_numpy(next(order))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    return time.perf_counter() - t0

steps(spec["warmup"])
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    print(steps(n), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--steps", type=int, default=400, help="timed steps per turn")
    args = parser.parse_args()
    import torch
    from safetensors.torch import save_file

    from bakeoff.builtins import digits

    threads = environment.default_threads()
    with tempfile.TemporaryDirectory(prefix="bakeoff-train-overhead-") as tmp:
        x_train, y_train, x_val, y_val = digits.train_and_validation()
        data = Path(tmp) / "data.npz"
        np.savez(data, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
        torch.manual_seed(0)
        init = Path(tmp) / "init.safetensors"
        save_file(digits.untrained().state_dict(), str(init))
        spec = TrainSpec(
            stack="torch",
            factory="bakeoff.builtins.digits:untrained",
            init_path=str(init),
            data_path=str(data),
            seed=0,
            batch_size=64,
            lr=2e-3,
            threads=threads,
        )
        launcher = LocalLauncher(Path(tmp) / "logs")
        workers = {"bakeoff's worker": launcher.start(TrainJob(train=spec), "worker")}
        lightning = importlib.util.find_spec("lightning") is not None
        if lightning:
            lit = dataclasses.replace(spec, stack="lightning")
            workers["Lightning"] = launcher.start(TrainJob(train=lit), "lightning")
        for worker in workers.values():
            worker.reply(300)
            worker.request(Warmup(seconds=1.0, min_calls=50), 300)
        bare_spec = {**dataclasses.asdict(spec), "warmup": 50}
        bare = subprocess.Popen(
            [sys.executable, "-c", BARE, json.dumps(bare_spec)],
            env=worker_env(threads),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert bare.stdin is not None and bare.stdout is not None
        assert bare.stdout.readline().strip() == "ready"
        ratios: dict[str, list[float]] = {name: [] for name in workers}
        print(f"== training step overhead: digits CNN, batch 64, {threads} thread(s)")
        for turn in range(args.turns):
            bare.stdin.write(f"{args.steps}\n")
            bare.stdin.flush()
            theirs = float(bare.stdout.readline()) / args.steps
            words = [f"bare loop {theirs * 1e3:.3f} ms/step"]
            for name, worker in workers.items():
                timed = worker.measure(Measure(calls=args.steps), 300)
                ours = timed.block_ns / 1e9 / args.steps
                ratios[name].append(ours / theirs)
                words.append(f"{name} {ours * 1e3:.3f} ms/step (ratio {ours / theirs:.3f})")
            print(f"turn {turn + 1}: " + ", ".join(words))
        for worker in workers.values():
            worker.request(Exit(), 60)
            worker.close()
        bare.stdin.close()
        bare.wait(60)
        median = statistics.median(ratios["bakeoff's worker"])
        print(
            f"median ratio (worker / bare loop): {median:.3f} (target <= 1.02: "
            f"{'met' if median <= 1.02 else 'not met'})"
        )
        if lightning:
            lit_median = statistics.median(ratios["Lightning"])
            print(
                f"median ratio (Lightning's Trainer.fit / bare loop): {lit_median:.3f} "
                f"(Lightning's overhead {lit_median - 1:+.1%}, the worker's included)"
            )
        else:
            print("Lightning: not measured (not installed: pip install 'bakeoff[train]')")


if __name__ == "__main__":
    main()
