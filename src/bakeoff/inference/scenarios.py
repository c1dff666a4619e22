"""What inference measures besides the latency rounds: the LoadGen server and
offline scenarios, run as hooks after the rounds on candidates still in the race
(raced-out ones lost), and repeated cold starts in fresh processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.candidates import Candidate, not_isolated
from bakeoff.inference.jobs import CandidateJobs
from bakeoff.inference.messages import Offline, Server
from bakeoff.inference.options import ScenarioSettings
from bakeoff.trials.engine import AfterRounds, Events, Gate, GateFailed
from bakeoff.trials.launcher import Launcher, Worker, WorkerFailed
from bakeoff.trials.settings import TrialSettings


@dataclass(frozen=True)
class ServerScenario:
    """The highest Poisson arrival rate whose p99 stays within the bound (batch 1)."""

    jobs: CandidateJobs
    settings: ScenarioSettings
    trial: TrialSettings
    events: Events

    def __call__(self, c: Candidate, worker: Worker) -> bool:
        if c.batch_size != 1:  # server queries carry one sample each
            return True
        s = self.settings
        self.events.note(
            f"{c.id}: server scenario, searching the highest rate with p99 <= "
            f"{s.server_bound_ms:g} ms",
            c,
        )
        single = float(np.median(c.samples())) / 1e9
        budget = self.trial.trial_timeout_s + s.server_steps * (3 * s.server_duration_s + 10)
        try:
            reply = worker.request(
                Server(
                    single_stream_s=single,
                    bound_ms=s.server_bound_ms,
                    duration_s=s.server_duration_s,
                    min_queries=64,
                    steps=s.server_steps,
                    out_dir=str(self.jobs.folder.loadgen / c.id),
                    seed=self.trial.seed,
                ),
                budget,
            )
        except WorkerFailed as exc:
            # The latency rounds stand; only the scenario is lost, and says why.
            c.server = {"scenario": "server", "error": str(exc)}
            return False
        c.server = reply["server"]
        self.events.note(f"{c.id}: server peak {c.server['max_qps']} queries/s", c)
        return True


def concurrency_levels(threads: int) -> list[int]:
    """1, 2, 4, ... streams, each with threads // streams threads: the machine's
    threads are shared out, never oversubscribed."""
    levels = [1]
    while levels[-1] * 2 <= threads:
        levels.append(levels[-1] * 2)
    return levels


@dataclass(frozen=True)
class OfflineScenario:
    """Every sample issued at once, concurrency swept.

    One stream runs in the candidate's measuring worker; more streams get a
    fresh worker each, loaded with the threads shared out between its streams
    and passed through the gate again (a differently configured runtime is a
    different build of the same variant).
    """

    jobs: CandidateJobs
    settings: ScenarioSettings
    trial: TrialSettings
    events: Events
    launcher: Launcher
    gate: Gate[Candidate]

    def __call__(self, c: Candidate, worker: Worker) -> bool:
        total_threads = self.jobs.threads_of(c)
        per_call_s = float(np.median(c.samples())) / 1e9
        sweep: list[dict[str, Any]] = []
        lost = False
        for streams in concurrency_levels(total_threads):
            per_stream = max(1, total_threads // streams)
            self.events.note(
                f"{c.id}: offline scenario, {streams} stream(s) x {per_stream} thread(s)", c
            )
            measured = [t["samples_per_s"] for t in sweep if t.get("samples_per_s")]
            # LoadGen issues expected rate x duration samples, so a guess far above
            # the real rate runs for far longer than duration_s. More streams seldom
            # scale linearly (shared cores, the GIL around small calls), so after the
            # first step the guess is the best rate measured so far, not streams x it.
            expected = max(measured) if measured else c.batch_size / max(per_call_s, 1e-6)
            try:
                step = self._step(c, worker, streams, per_stream, expected)
            except WorkerFailed as exc:
                sweep.append(
                    {"concurrency": streams, "threads_per_stream": per_stream, "error": str(exc)}
                )
                if streams == 1:
                    lost = True  # the latency rounds stand; only the scenario is lost
                    break
                continue
            sweep.append(step)
        ok = [t for t in sweep if t.get("samples_per_s")]
        best = max(ok, key=lambda t: t["samples_per_s"]) if ok else None
        c.offline = {
            "scenario": "offline",
            "batch_size": c.batch_size,
            "sweep": sweep,
            "best": best,
            "generator": "mlperf_loadgen (offline: every sample issued at once)",
        }
        if best:
            self.events.note(
                f"{c.id}: offline peak {best['samples_per_s']:.1f} samples/s "
                f"with {best['concurrency']} stream(s)",
                c,
            )
        return not lost

    def _step(
        self, c: Candidate, worker: Worker, streams: int, per_stream: int, expected_sps: float
    ) -> dict[str, Any]:
        """One concurrency level: its LoadGen figures, threads and applied settings."""
        s = self.settings
        cmd = Offline(
            concurrency=streams,
            expected_sps=expected_sps,
            duration_s=s.offline_duration_s,
            out_dir=str(self.jobs.folder.loadgen / f"{c.id}-offline-{streams}"),
            seed=self.trial.seed,
        )
        budget = self.trial.trial_timeout_s + 4 * s.offline_duration_s + 10
        if streams == 1:
            reply = worker.request(cmd, budget)
            return {**reply["offline"], "threads_per_stream": per_stream, "settings": c.settings}
        job = self.jobs.load(c, threads=per_stream, streams=streams)
        fresh = self.launcher.start(job, f"{c.id}-offline-{streams}")
        try:
            applied = fresh.reply(self.trial.trial_timeout_s)["settings"]
            try:
                checked = self.gate.check(c, job, record=False)
            except GateFailed as exc:
                raise WorkerFailed(f"with {streams} streams: {exc}") from None
            if not checked.passed:
                raise WorkerFailed(f"with {streams} streams, {checked.words}")
            reply = fresh.request(cmd, budget)
        finally:
            fresh.close()
        return {**reply["offline"], "threads_per_stream": per_stream, "settings": applied}


def after_rounds(
    jobs: CandidateJobs,
    settings: ScenarioSettings,
    trial: TrialSettings,
    events: Events,
    launcher: Launcher,
    gate: Gate[Candidate],
) -> list[AfterRounds[Candidate]]:
    """The hooks the run's --scenario asks for (none for latency alone)."""
    if settings.scenario == "server":
        return [ServerScenario(jobs, settings, trial, events)]
    if settings.scenario == "offline":
        return [OfflineScenario(jobs, settings, trial, events, launcher, gate)]
    return []


def repeat_cold_starts(
    c: Candidate,
    jobs: CandidateJobs,
    launcher: Launcher,
    cold_starts: int,
    timeout: float,
    events: Events,
) -> None:
    """More fresh processes, one at a time, so cold start gets a CI of its own. The
    measuring worker's load is the first of them when it was a cold start measured
    alone; otherwise (one worker per build, or loads side by side) all are fresh."""
    assert c.load_s is not None and c.first_call_s is not None
    loads, firsts, imports = [c.load_s], [c.first_call_s], [c.settings.get("import_s")]
    if not_isolated(c):
        loads, firsts, imports = [], [], []
    for n in range(len(loads) + 1, cold_starts + 1):
        events.note(f"{c.id}: cold start {n} of {cold_starts}", None)
        try:
            reply = launcher.run(jobs.cold_start(c), f"{c.id}-cold{n}", timeout)
        except WorkerFailed as exc:
            c.cold_start_error = f"cold start {n} failed: {exc}"
            break
        loads.append(reply["load_s"])
        firsts.append(reply["first_call_s"])
        imports.append(reply.get("import_s"))
    c.cold_starts = {"load": loads, "first_call": firsts}
    timed = [float(x) for x in imports if x is not None]
    if len(timed) == len(imports):
        c.cold_starts["import"] = timed
