"""Models for the server's own tests, where what is tested is the server (queueing,
readiness, draining), not a runtime: their timings are set, their answers known.

Run as a script it serves one of them with the real server:
    python serve_models.py slow|text [--port 0] [--warmup-s S] [--call-s S] [--max-queue N]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np

from bakeoff.serve import ServedSpec, ServeSettings, TensorSpec, serve
from bakeoff.serve.model import Runner, TextInput


class SlowModel:
    """y = 2x on rows of 4 floats; the first call (the warm-up) takes `warmup_s`,
    every later call `call_s`; a row of -1s makes it fail. Output `running` says,
    per row, how many calls of any instance were running when this one started
    (itself included)."""

    def __init__(self, warmup_s: float, call_s: float) -> None:
        self.warmup_s, self.call_s = warmup_s, call_s
        self.running = 0
        self.lock = threading.Lock()
        self.spec = ServedSpec(
            name="slow",
            platform="test_slow",
            inputs=[TensorSpec("x", "FP32", (-1, 4))],
            outputs=[TensorSpec("y", "FP32", (-1, 4)), TensorSpec("running", "INT64", (-1, 1))],
            threads=2,
        )

    def load(self, threads: int) -> Runner:
        calls = [0]

        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            calls[0] += 1
            with self.lock:
                self.running += 1
                running = self.running
            time.sleep(self.warmup_s if calls[0] == 1 else self.call_s)
            with self.lock:
                self.running -= 1
            x = inputs["x"]
            if (x == -1).all(axis=1).any():
                raise ValueError("this model refuses a row of -1s")
            return {"y": x * 2, "running": np.full((x.shape[0], 1), running, dtype=np.int64)}

        return run


class TokenSum:
    """Takes MiniLM's token tensors (or texts, tokenized by its own tokenizer) and
    returns, per row, the sum of input_ids and of attention_mask."""

    def __init__(self, tokenizer: Path, max_length: int = 16) -> None:
        self.spec = ServedSpec(
            name="tokens",
            platform="test_tokens",
            inputs=[
                TensorSpec("input_ids", "INT64", (-1, max_length)),
                TensorSpec("attention_mask", "INT64", (-1, max_length)),
            ],
            outputs=[TensorSpec("sums", "INT64", (-1, 2))],
            threads=1,
            text=TextInput("text", tokenizer, max_length, ("input_ids", "attention_mask")),
        )

    def load(self, threads: int) -> Runner:
        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            ids, mask = inputs["input_ids"], inputs["attention_mask"]
            return {"sums": np.stack([ids.sum(axis=1), mask.sum(axis=1)], axis=1)}

        return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["slow", "text"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--warmup-s", type=float, default=0.0)
    parser.add_argument("--call-s", type=float, default=0.0)
    parser.add_argument("--max-queue", type=int, default=256)
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--drain-s", type=float, default=30.0)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--max-queue-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    if args.model == "slow":
        model: SlowModel | TokenSum = SlowModel(args.warmup_s, args.call_s)
    else:
        from bakeoff.builtins.minilm import model_folder

        model = TokenSum(Path(model_folder()))
    settings = ServeSettings(
        max_batch_size=args.max_batch_size,
        max_queue=args.max_queue,
        drain_s=args.drain_s,
        instances=args.instances,
        max_queue_delay_ms=args.max_queue_delay_ms,
    )
    raise SystemExit(serve(model, settings, port=args.port))


if __name__ == "__main__":
    main()
