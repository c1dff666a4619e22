"""The batcher's lone-request path, driven directly (no HTTP): a lone request on an
idle one-instance server runs on the event loop's own thread once a lone request
has shown the instance to be quick; anything else goes through the queue and the
instance's thread. Which thread ran each call is what the runner records."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from bakeoff.serve import batcher as batcher_module
from bakeoff.serve.batcher import Batcher, BatchFailed, Observer


@dataclass
class Recorder:
    """y = 2x; sleeps `seconds` per call; fails on a row of -1s; notes each call's
    thread and rows."""

    seconds: float = 0.0
    calls: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["x"]
        self.calls.append((threading.current_thread().name, x.shape[0]))
        time.sleep(self.seconds)
        if (x == -1).all(axis=1).any():
            raise ValueError("a row of -1s")
        return {"y": x * 2}


def _rows(n: int, value: float = 1.0) -> dict[str, np.ndarray]:
    return {"x": np.full((n, 4), value, dtype=np.float32)}


def _batcher(
    runners: list[Recorder], in_server: list[int], executed: list[int], delay_s: float = 0.0
) -> Batcher:
    return Batcher(
        runners,  # type: ignore[arg-type]  # a Recorder is a Runner
        {"x": 0},
        max_rows=8,
        max_delay_s=delay_s,
        max_queue=16,
        observer=Observer(batch=lambda rows, seconds: executed.append(rows)),
        in_server=lambda: in_server[0],
    )


async def _settle() -> None:
    for _ in range(3):  # the dispatcher takes the instance again; metrics are recorded
        await asyncio.sleep(0)


def test_a_lone_request_runs_on_the_loop_thread_once_the_instance_is_known_quick() -> None:
    runner = Recorder()
    in_server, executed = [1], []

    async def main() -> None:
        b = _batcher([runner], in_server, executed)
        b.start()
        await _settle()
        loop_thread = threading.current_thread().name
        # not timed yet: the first lone request goes through the queue to the thread
        assert await b.run_now(_rows(1), 1, ()) is None
        out = await b.infer(_rows(1), 1, ())
        assert out["y"].tolist() == [[2.0] * 4]
        await _settle()
        # now it is known quick: it runs here, at once, and its answer is its own
        done = await b.run_now(_rows(2, 3.0), 2, ())
        assert done is not None and done["y"].tolist() == [[6.0] * 4] * 2
        threads = [name for name, _ in runner.calls]
        assert threads[0].startswith("bakeoff-instance") and threads[1] == loop_thread
        await _settle()
        assert executed == [1, 2]  # counted, after the answer
        # the runtime's error fails the request alone, as a BatchFailed (a 500)
        with pytest.raises(BatchFailed, match="ValueError: a row of -1s"):
            await b.run_now(_rows(1, -1.0), 1, ())
        await _settle()
        # ... and a failed lone request is not timed: the next goes to the thread again
        assert await b.run_now(_rows(1), 1, ()) is None
        await b.stop()

    asyncio.run(main())


def test_company_a_slow_instance_or_two_instances_go_through_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Wide apart, so a busy machine's timing of the quick instance (a thread hand-off,
    # ms at worst) cannot cross it: 8 of its rows stay well under 0.25 s, and the slow
    # instance's single row (0.3 s) is over it.
    monkeypatch.setattr(batcher_module, "INLINE_MAX_S", 0.25)

    async def known_quick(runners: list[Recorder], in_server: list[int]) -> Batcher:
        b = _batcher(runners, in_server, [])
        b.start()
        await _settle()
        await b.infer(_rows(1), 1, ())  # times the instance alone
        await _settle()
        return b

    async def main() -> None:
        quick = Recorder()
        in_server = [1]
        b = await known_quick([quick], in_server)
        in_server[0] = 2  # another request is in the server: it may join a batch
        assert await b.run_now(_rows(1), 1, ()) is None
        in_server[0] = 1
        # 8 rows at the lone request's time per row would be fine; a slow one is not
        assert await b.run_now(_rows(8), 8, ()) is not None
        await _settle()
        await b.stop()

        slow = Recorder(seconds=0.3)  # over INLINE_MAX_S per row
        b = await known_quick([slow], [1])
        assert await b.run_now(_rows(1), 1, ()) is None  # it would hold the loop up
        await b.stop()

        two = [Recorder(), Recorder()]
        b = await known_quick(two, [1])
        assert await b.run_now(_rows(1), 1, ()) is None  # the other instance could take company
        await b.stop()

    asyncio.run(main())


def test_requests_arriving_together_are_batched_not_run_one_by_one_on_the_loop() -> None:
    """Handlers started in the same turn of the loop (requests read from several
    sockets at once): the first must not run alone on the loop thread before the
    others are even counted, or concurrent clients would never be batched."""
    runner = Recorder()
    in_server, executed = [0], []

    async def main() -> None:
        b = _batcher([runner], in_server, executed, delay_s=0.5)
        b.start()
        await _settle()
        in_server[0] = 1
        await b.infer(_rows(1), 1, ())  # times the instance alone: known quick
        in_server[0] = 0
        await _settle()

        async def handler(value: float) -> list[list[float]]:
            in_server[0] += 1  # as the server counts a request when its handler starts
            out = await b.run_now(_rows(1, value), 1, ())
            if out is None:
                out = await b.infer(_rows(1, value), 1, ())
            in_server[0] -= 1
            return list(out["y"].tolist())

        answers = await asyncio.gather(*(handler(v) for v in (1.0, 2.0, 3.0, 4.0)))
        assert answers == [[[2 * v] * 4] for v in (1.0, 2.0, 3.0, 4.0)]
        assert executed[1:] == [4]  # one batch of all four
        await b.stop()

    asyncio.run(main())
