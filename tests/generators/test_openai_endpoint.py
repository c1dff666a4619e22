"""bakeoff's own client for an engine's OpenAI-compatible server: requests sent at
their arrival times, streamed, and timed as the server scenario times an engine."""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.tiny_gpt2 import tiny_gpt2, with_tokenizer

from bakeoff.generators import openai_endpoint
from bakeoff.generators.arrivals import poisson_schedule, poisson_times

Stamps = openai_endpoint.Stamps


def test_in_flight_is_the_mean_overlap_over_each_requests_life() -> None:
    # a: 0-10; b: 5-15 (half of a's life beside it); c: 20-20 (no life: itself)
    stamps = [Stamps(0, 1, 10, 3, 3), Stamps(5, 6, 15, 3, 3), Stamps(20, None, None, 0, None)]
    assert openai_endpoint.in_flight_beside(stamps) == [1.5, 1.5, 1.0]


def test_the_schedule_is_the_one_the_engines_get() -> None:
    prompts = [[1], [2, 3], [4, 5, 6]]
    times = poisson_times(8.0, 20, len(prompts), seed=3)
    arrivals = poisson_schedule(8.0, 20, prompts, seed=3)
    assert [(a.at_ns, a.prompt) for a in arrivals] == [(t, prompts[i]) for t, i in times]
    assert times[0][0] == 0 and all(a[0] <= b[0] for a, b in itertools.pairwise(times))


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`transformers serve` (transformers' own server) on a tiny GPT-2, on loopback:
    its URL and its model's name (the folder it is pinned to)."""
    root = tmp_path_factory.mktemp("tserve")
    folder = with_tokenizer(tiny_gpt2(root / "model", vocab=320))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(folder)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--default-seed", "0"]
    log = (root / "serve.log").open("wb")
    env = {"HOME": str(root), "HF_HOME": str(root / "hf"), "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env | _path())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (root / "serve.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "transformers serve was not ready in 120 s"
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        yield url, str(folder)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _path() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "TMPDIR", "LANG")}


def test_requests_go_out_at_their_arrival_times_and_are_timed_per_token(
    transformers_server: tuple[str, str],
) -> None:
    url, model = transformers_server
    prompts = ["def __init__(self, name):", "return self.name", "self.name = name"]
    schedule = [(at, prompts[i]) for at, i in poisson_times(10.0, 6, len(prompts), seed=0)]
    started = time.perf_counter_ns()
    served, stamps = openai_endpoint.send(url, model, schedule, 6)
    took = time.perf_counter_ns() - started
    assert [s.error for s in stamps] == [None] * 6
    assert len(served) == 6 and took >= schedule[-1][0]
    for s, (at_ns, _) in zip(stamps, schedule, strict=True):
        assert s.sent_ns >= at_ns  # never sent before its arrival
    for s in served:
        assert 1 <= s.tokens <= 6  # the server's own count (usage.completion_tokens)
        assert s.arrived_ns < s.first_ns <= s.last_ns
        # transformers serve writes the text it has queued in one event: on a busy
        # machine a whole answer can come as one chunk, first and last at once
        assert s.ttft_ns > 0 and s.tpot_ns >= 0 and s.running >= 1.0


def test_a_refused_request_is_that_requests_failure_not_the_clients(
    transformers_server: tuple[str, str],
) -> None:
    url, model = transformers_server
    # a prompt that is not text: the server answers 4xx, and the client goes on
    schedule = [(0, "return self.name")]
    served, stamps = openai_endpoint.send(url, model, schedule, 4, extra={"prompt": [1, 2, 3]})
    assert served == [] and stamps[0].error and stamps[0].error.startswith("HTTP 4")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    served, stamps = openai_endpoint.send(f"http://127.0.0.1:{port}", "m", schedule, 4)
    assert served == [] and stamps[0].error and "Connect" in stamps[0].error
