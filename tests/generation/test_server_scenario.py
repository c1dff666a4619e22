"""The generative server scenario: Poisson arrivals through each engine's own
scheduler, the search for the highest rate within a TTFT / TPOT target, and its
verdict; planted engines (one that batches continuously, one that serves one
request at a time) in simulated time, real queues around real sleeps, and a whole
run on two real engines with its report."""

from __future__ import annotations

import html
import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.generation.candidate import GenCandidate
from bakeoff.generation.server_scenario import (
    ServerSweep,
    Target,
    parse_slo,
    rate_step,
    search,
    server_verdict,
    target_for,
)
from bakeoff.generators import Batch
from bakeoff.generators.arrivals import (
    Arrival,
    one_at_a_time,
    poisson_schedule,
    queue_in_batches,
)
from bakeoff.trials.jobs import Timed
from browser import CHROMIUM, look_at
from extras import require_program
from tiny_gpt2 import generation_workload

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8]]
TOKENS = 8  # every planted request writes this many
TARGET = Target(50.0, 10.0, {"ttft_p99_ms": "given", "tpot_p99_ms": "given"})


def _timed(arrived: list[int], first: list[int], last: list[int], running: list[float]) -> Timed:
    tpot = [(b - a) // (TOKENS - 1) for a, b in zip(first, last, strict=True)]
    extra = {
        "tpot_ns": tpot,
        "tokens": [TOKENS] * len(arrived),
        "arrived_ns": arrived,
        "last_ns": last,
        "running_milli": [round(r * 1000) for r in running],
    }
    return Timed([f - a for a, f in zip(arrived, first, strict=True)], max(last), extra)


def one_at_a_time_engine(schedule: Sequence[Arrival]) -> Timed:
    """Each request alone: a 5 ms prefill, then 7 tokens 2.5 ms apart (22.5 ms)."""
    free, first, last = 0, [], []
    for a in schedule:
        start = max(a.at_ns, free)
        first.append(start + 5_000_000)
        last.append(first[-1] + (TOKENS - 1) * 2_500_000)
        free = last[-1]
    return _timed([a.at_ns for a in schedule], first, last, [1.0] * len(schedule))


def continuous_engine(schedule: Sequence[Arrival], slots: int = 8) -> Timed:
    """A 2.5 ms step decodes every running request and admits waiting ones (up to
    `slots`), as vLLM's scheduler does: a request's first token comes in the step
    that admits it."""
    n = len(schedule)
    first, last = [0] * n, [0] * n
    written, running_sum, steps = [0] * n, [0.0] * n, [0] * n
    waiting: list[int] = []
    running: list[int] = []
    nxt, now = 0, 0
    while nxt < n or waiting or running:
        while nxt < n and schedule[nxt].at_ns <= now:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            now = schedule[nxt].at_ns
            continue
        while waiting and len(running) < slots:
            running.append(waiting.pop(0))
        now += 2_500_000
        for i in running:
            written[i] += 1
            running_sum[i] += len(running)
            steps[i] += 1
            if written[i] == 1:
                first[i] = now
            last[i] = now
        running = [i for i in running if written[i] < TOKENS]
    mean = [running_sum[i] / steps[i] for i in range(n)]
    return _timed([a.at_ns for a in schedule], first, last, mean)


def _probe(engine):  # type: ignore[no-untyped-def]
    def probe(rate: float, seed: int):  # type: ignore[no-untyped-def]
        timed = engine(poisson_schedule(rate, 64, PROMPTS, seed))
        return rate_step(timed, rate, seed, TARGET)

    return probe


def _candidate(runtime: str, found: dict) -> GenCandidate:
    c = GenCandidate(runtime, "fp32")
    c.set_status("ok")
    c.server = found
    return c


def test_continuous_batching_sustains_the_higher_rate_and_the_verdict_says_so() -> None:
    serial = search(_probe(one_at_a_time_engine), 10.0, steps=4, repeats=2)
    continuous = search(_probe(continuous_engine), 10.0, steps=4, repeats=2)
    low, high = serial["highest_rate"], continuous["highest_rate"]
    assert low is not None and high is not None
    # one at a time: under 1 / 22.5 ms = 44 requests/s; eight at a time: far more
    assert low["requests_per_s"] < 44 < high["requests_per_s"]
    for found in (serial, continuous):
        top = found["highest_rate"]
        assert top["repeats"] == 3 and top["bracket"][0] < top["bracket"][1]
        lo, hi = top["goodput"]["ci95"]
        assert 0 < lo <= top["goodput"]["value"] <= hi
        at = {
            rate: [s["met"] for s in found["tested"] if s["rate"] == rate]
            for rate in top["bracket"]
        }
        # met in every send at the highest rate; missed at least once at the next
        assert all(at[top["requests_per_s"]]) and not all(at[found["lowest_missed"]])
    # the continuous engine ran several requests at once; the other never did
    assert max(s["mean_running"] for s in continuous["tested"]) > 2
    assert {s["mean_running"] for s in serial["tested"]} == {1.0}
    v = server_verdict([_candidate("torch", serial), _candidate("vllm", continuous)], TARGET)
    assert v["winner"] == "vllm-fp32" and v["ranking"] == ["vllm-fp32", "torch-fp32"]
    assert v["ties"] == [] and "torch-fp32 missed it at" in v["headline"]
    assert v["target"]["ttft_p99_ms"] == 50.0


class PlantedWorker:
    """A measuring worker's channel, answering `Arrivals` with a planted engine."""

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.engine, self.asked = engine, 0

    def request(self, cmd, timeout_s: float) -> dict:  # type: ignore[no-untyped-def]
        self.asked += 1
        schedule = poisson_schedule(cmd.rate_per_s, cmd.requests, PROMPTS, cmd.seed)
        return self.engine(schedule).to_json()


def test_a_resumed_server_scenario_keeps_its_target_and_the_searches_that_finished(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server_target.json"
    serial, continuous = GenCandidate("torch", "fp32"), GenCandidate("vllm", "fp32")
    for c in (serial, continuous):  # one request at a time: 40 requests/s
        c.rounds_ns, c.ttft_ns, c.block_ns = [[3_000_000] * 4], [[5_000_000] * 4], [100_000_000]
    saved: list[GenCandidate] = []

    def sweep(given: dict[str, float]) -> ServerSweep:
        return ServerSweep(
            given, 64, 2, 1, 5.0, lambda _: None, target_path=path, changed=saved.append
        )

    first = sweep({"ttft_p99_ms": 200.0, "tpot_p99_ms": 10.0})
    assert (
        first(
            [
                (serial, PlantedWorker(one_at_a_time_engine)),
                (continuous, PlantedWorker(continuous_engine)),
            ]
        )
        == set()
    )
    assert saved == [serial, continuous]  # each to the store as its search ends
    assert json.loads(path.read_text())["ttft_p99_ms"] == 200.0
    kept = serial.server
    continuous.server = {}  # its search had not finished when the run was interrupted
    again = sweep({})  # would derive another target from the rounds, if it had none
    workers = PlantedWorker(one_at_a_time_engine), PlantedWorker(continuous_engine)
    again([(serial, workers[0]), (continuous, workers[1])])
    assert again.target == first.target and serial.server is kept
    assert workers[0].asked == 0 and workers[1].asked > 0
    assert (
        continuous.server["highest_rate"]["requests_per_s"] > kept["highest_rate"]["requests_per_s"]
    )


def test_a_spent_budget_stops_the_search_with_what_it_has() -> None:
    """Out of time after the second send: no more growing or narrowing; the repeats
    still go to the highest rate met, and `stopped` says the bracket stayed open."""
    sends = []

    def probe(rate: float, seed: int):  # type: ignore[no-untyped-def]
        sends.append(rate)
        return _probe(continuous_engine)(rate, seed)

    found = search(probe, 10.0, steps=4, repeats=2, out_of_time=lambda: len(sends) >= 2)
    assert sends == [10.0, 20.0, 20.0, 20.0]  # two sends, then the repeats of the highest
    assert found["stopped"] == "its share of the budget was spent before the bracket closed"
    top = found["highest_rate"]
    assert top["requests_per_s"] == 20.0 and top["bracket"] == [20.0, None]
    full = search(_probe(continuous_engine), 10.0, steps=4, repeats=2)
    assert full["stopped"] == "the bracket closed"


def test_an_engine_not_shown_to_miss_the_leaders_rate_is_tied_with_it() -> None:
    found = search(_probe(continuous_engine), 10.0, steps=4, repeats=2)
    never_missed = {**found, "lowest_missed": None}
    v = server_verdict([_candidate("vllm", found), _candidate("torch", never_missed)], TARGET)
    assert v["ties"] and "not separated" in v["headline"]


def test_a_target_no_rate_meets_is_said() -> None:
    impossible = Target(0.001, 0.001, {})

    def probe(rate: float, seed: int):  # type: ignore[no-untyped-def]
        timed = one_at_a_time_engine(poisson_schedule(rate, 16, PROMPTS, seed))
        return rate_step(timed, rate, seed, impossible)

    found = search(probe, 10.0, steps=2, repeats=1)
    assert found["highest_rate"] is None and len(found["tested"]) == 4  # 1 + 3 halvings
    v = server_verdict([_candidate("torch", found)], impossible)
    assert v["winner"] is None and "no engine met the target" in v["headline"]


def test_the_target_is_given_or_derived_from_the_references_rounds() -> None:
    ref = GenCandidate("torch", "fp32")
    ref.rounds_ns = [[2_000_000] * 10, [4_000_000] * 10]  # TPOT
    ref.ttft_ns = [[10_000_000] * 10, [10_000_000] * 10]
    derived = target_for([ref], {"tpot_p99_ms": 7.5})
    assert derived.tpot_p99_ms == 7.5 and derived.how["tpot_p99_ms"] == "given (--slo)"
    assert derived.ttft_p99_ms == pytest.approx(40.0)
    assert derived.how["ttft_p99_ms"].startswith("4x torch-fp32's p99 TTFT")
    assert target_for([ref], {}).tpot_p99_ms == pytest.approx(8.0, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ttft_p99_ms=abc", "'ttft_p99_ms=abc'"),
        ("ttft=100", "'ttft=100'"),
        ("tpot_p99_ms=-1", "above 0"),
        ("tpot_p99_ms", "KEY=MS"),
    ],
)
def test_a_bad_slo_is_named(text: str, words: str) -> None:
    with pytest.raises(UserError, match="--slo") as caught:
        parse_slo(text)
    assert words in str(caught.value)


def test_a_good_slo_is_read() -> None:
    assert parse_slo("ttft_p99_ms=200, tpot_p99_ms=20.5") == {
        "ttft_p99_ms": 200.0,
        "tpot_p99_ms": 20.5,
    }
    assert parse_slo(None) == {}


def test_poisson_arrivals_are_seeded_and_at_the_rate() -> None:
    a = poisson_schedule(100.0, 2000, PROMPTS, seed=3)
    assert a == poisson_schedule(100.0, 2000, PROMPTS, seed=3)
    assert a != poisson_schedule(100.0, 2000, PROMPTS, seed=4)
    assert a[0].at_ns == 0 and all(x.at_ns <= y.at_ns for x, y in itertools.pairwise(a))
    assert (len(a) - 1) / (a[-1].at_ns / 1e9) == pytest.approx(100.0, rel=0.1)
    assert {tuple(x.prompt) for x in a} == {tuple(p) for p in PROMPTS}
    with pytest.raises(ValueError, match="rate above 0"):
        poisson_schedule(0.0, 10, PROMPTS, 0)


def test_a_queue_forms_static_batches_of_what_has_arrived() -> None:
    """An engine without a scheduler: requests that arrived while it was busy go in
    together, at most max_batch, and wait for the whole batch."""
    batches: list[int] = []

    def generate_batch(prompts: Sequence[Sequence[int]], new: int) -> Batch:
        batches.append(len(prompts))
        time.sleep(0.05)
        return Batch([[9] * new for _ in prompts], [10_000_000] * len(prompts))

    schedule = [Arrival(0, [1]), *(Arrival(5_000_000 + i, [2]) for i in range(5))]
    served = queue_in_batches(schedule, generate_batch, 4, max_batch=3)
    assert batches == [1, 3, 2]
    assert [s.running for s in served] == [1, 3, 3, 3, 2, 2]
    assert all(s.tokens == 4 and s.first_ns > s.arrived_ns for s in served)
    # the second batch started when the first ended: its requests waited for it
    assert min(s.ttft_ns for s in served[1:4]) >= 40_000_000
    assert served[1].last_ns == served[3].last_ns


def test_one_at_a_time_stamps_each_token_and_queues_the_rest() -> None:
    def generate(prompt: Sequence[int], new: int, on_token) -> list[int]:  # type: ignore[no-untyped-def]
        for _ in range(new):
            time.sleep(0.002)
            on_token(7)
        return [7] * new

    schedule = [Arrival(0, [1]), Arrival(0, [2])]
    first, second = one_at_a_time(schedule, generate, 5)
    assert first.tokens == second.tokens == 5
    assert second.first_ns > first.last_ns  # it waited for the first
    assert np.isclose(first.tpot_ns, (first.last_ns - first.first_ns) / 4)


@pytest.fixture(scope="module")
def server_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    """--scenario server on torch (transformers' continuous batching) and MLX (one
    request at a time): (document, output, store)."""
    folder = tmp_path_factory.mktemp("server")
    wl = generation_workload(folder)
    store = folder / "s.db"
    result = CliRunner().invoke(
        app,
        [
            "run", str(wl), "--quick", "--budget", "3", "--runtimes", "torch,mlx",
            "--precisions", "fp32", "--scenario", "server",
            "--slo", "ttft_p99_ms=2000,tpot_p99_ms=50",
            "--json", str(folder / "g.json"), "--store", str(store),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((folder / "g.json").read_text()), result.output, store


def test_the_server_scenario_finds_each_engines_highest_rate_within_the_target(
    server_run: tuple[dict, str, Path],
) -> None:
    """--scenario server: after the TPOT race, Poisson arrivals at rates searched per
    engine, the target given in part and derived for the rest, a verdict on the rate,
    each engine's batching named; the sweep is not run."""
    doc, output, _ = server_run
    v = doc["verdict"]["server_rate"]
    # given here (derived ones: test_the_target_is_given_or_derived_from_the_references_rounds)
    assert (v["target"]["ttft_p99_ms"], v["target"]["tpot_p99_ms"]) == (2000.0, 50.0)
    assert v["target"]["how"]["tpot_p99_ms"].startswith("given")
    assert doc["verdicts"] == [doc["verdict"]["tpot_batch_1"], v]
    assert "tokens_per_s_concurrency" not in doc["verdict"]
    for c in doc["candidates"]:
        assert c["status"] == "ok", c["reason"]
        server = c["server"]
        kind = "continuous batching" if c["runtime"] == "torch" else "none"
        assert server["batching"].startswith(kind), server["batching"]
        # A busy machine can spend an engine's budget (--budget 3) before its bracket
        # closes: then the search says so, having sent at least its first rate.
        if server["stopped"] == "the bracket closed":
            assert len(server["tested"]) >= 3, server
        else:
            assert "budget" in server["stopped"] and server["tested"], server
        for step in server["tested"]:
            assert step["requests"] == 24 and step["ttft_ms"]["p99"] >= step["ttft_ms"]["p50"] > 0
            assert step["goodput"] <= step["completed_per_s"] + 1e-9
        top = server["highest_rate"]
        if top is not None:
            assert top["repeats"] == 3 and top["requests_per_s"] > 0
    if v["winner"] is not None:
        assert v["winner"] in {"torch-fp32", "mlx-fp32"} and v["headline"]
    assert "server scenario: Poisson arrivals" in output
    assert "each rate sent" in output and "request rate within the target" in output


def _server_report(server_run: tuple[dict, str, Path], path: Path) -> str:
    doc, _, store = server_run
    argv = ["report", doc["run_id"], "-o", str(path), "--store", str(store)]
    written = CliRunner().invoke(app, argv)
    assert written.exit_code == 0, written.output
    return path.read_text()


def test_the_server_scenarios_report_draws_ttft_against_the_offered_rate(
    server_run: tuple[dict, str, Path], tmp_path: Path
) -> None:
    doc, _, _ = server_run
    page = _server_report(server_run, tmp_path / "r.html")
    assert 'id="section-server"' in page
    assert "gen-server-ttft" in page and "gen-server-tradeoff" in page
    ttft = page[page.index('id="gen-server-ttft"') : page.index('id="gen-server-tradeoff"')]
    # one line per engine, and the target's, each with its title
    assert ttft.count('class="line"') == len(doc["candidates"]) + 1
    assert "target" in ttft
    assert doc["verdict"]["server_rate"]["headline"] in html.unescape(page)


@pytest.mark.browser
def test_the_server_scenarios_charts_render_in_headless_chromium(
    server_run: tuple[dict, str, Path], tmp_path: Path
) -> None:
    require_program(CHROMIUM, "apt-get install chromium (make browser)")
    _doc, _, _ = server_run
    page = tmp_path / "r.html"
    _server_report(server_run, page)
    seen = look_at(page, tmp_path / "profile")
    assert seen["errors"] == [] and seen["outside"] == []
    by_id = {c["id"]: c for c in seen["charts"]}
    for chart in ("gen-server-ttft", "gen-server-tradeoff"):  # laid out, lines only
        assert by_id[chart]["width"] > 300 and by_id[chart]["height"] > 200
    drawn = [c for c in seen["charts"] if c["marks"]]
    assert all(c["hit"] and c["titled"] for c in drawn), seen["charts"]
