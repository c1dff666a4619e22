"""The HTML report's environment section: the hardware, software, workload and
method a run was measured with, and the settings each runtime applied, so a
reader can tell whether two reports are comparable. Every value is escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from bakeoff.report.charts import num
from bakeoff.report.data import StoredRun


def _e(value: Any) -> str:
    return escape(str(value))


def _dl(rows: list[tuple[str, Any]]) -> str:
    """A definition list of the rows that have a value."""
    return (
        "<dl>"
        + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows if v not in (None, ""))
        + "</dl>"
    )


def environment(run: StoredRun) -> str:
    """Four cards (hardware, software, workload, method), then the runtimes' settings."""
    return (
        '<div class="card" id="environment">'
        f"<section><h3>Hardware</h3>{_hardware(run.environment, _peak_gflops(run))}</section>"
        f"<section><h3>Software</h3>{_software(run.environment)}</section>"
        f"<section><h3>Workload</h3>{_workload(run)}</section>"
        f"<section><h3>Method</h3>{_method(run)}</section></div>"
        f"<h3>Settings each runtime applied</h3>{_runtime_settings(run)}"
    )


def _gpu(gpu: Any) -> str:
    """The GPUs as the fingerprint recorded them: a mapping, a list, or a word."""
    if isinstance(gpu, dict):
        return ", ".join(f"{k} {v}" for k, v in gpu.items())
    if isinstance(gpu, list) and gpu:
        return "; ".join(
            f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory_mb', '?')} MiB)"
            if isinstance(g, dict)
            else str(g)
            for g in gpu
        )
    if gpu:
        return str(gpu)
    return "none (no CUDA device)"


def _peak_gflops(run: StoredRun) -> Any:
    """The run's measured GEMM peaks: the result document's environment has them; the
    stored environment, where a run recorded them there."""
    doc_env = (run.document or {}).get("environment") or {}
    return doc_env.get("peak_gflops") or run.environment.get("peak_gflops")


def _hardware(env: dict[str, Any], peaks: Any = None) -> str:
    cpu = env.get("cpu") or {}
    return _dl(
        [
            ("CPU", cpu.get("model")),
            (
                "cores",
                f"{cpu.get('physical_cores')} physical / {cpu.get('logical_cores')} logical"
                + (f", affinity {cpu['affinity']}" if cpu.get("affinity") else ""),
            ),
            ("CPU flags", ", ".join(cpu.get("flags") or []) or "none notable"),
            (
                "CPU flags simulated",
                None
                if "flags_simulated" not in cpu
                else f"BAKEOFF_CPU_FLAGS={cpu['flags_simulated']!r} for the advice; the "
                f"runtimes ran on: {', '.join(cpu.get('detected_flags') or []) or 'none notable'}",
            ),
            ("frequency", f"{cpu['frequency_mhz']} MHz" if cpu.get("frequency_mhz") else None),
            ("memory", f"{env.get('memory_gb')} GiB"),
            ("GPU / driver", _gpu(env.get("gpu"))),
            ("machine", env.get("machine")),
            ("GEMM peak", _peaks(peaks)),
        ]
    )


def _peaks(peaks: Any) -> str | None:
    """The measured GEMM peaks (efficiency.measure_peak) with how each was measured,
    or why one was not; None for a run from before they were measured."""
    if not isinstance(peaks, dict) or not peaks:
        return None
    parts = []
    for precision, p in peaks.items():
        if p.get("gflops") is None:
            parts.append(f"{precision}: not measured ({p.get('why') or 'no reason recorded'})")
            continue
        note = f"; {p['note']}" if p.get("note") else ""
        parts.append(f"{precision}: {num(p['gflops'])} GFLOP/s ({p.get('how')}{note})")
    return "; ".join(parts)


def _software(env: dict[str, Any]) -> str:
    pkgs = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items() if v)
    return _dl(
        [
            ("bakeoff", env.get("bakeoff_version")),
            ("Python", env.get("python")),
            ("platform", env.get("platform")),
            ("packages", pkgs),
        ]
    )


def _workload(run: StoredRun) -> str:
    st = run.settings
    wl = (run.document or {}).get("workload") or {}
    shapes = "; ".join(f"{k}: {v}" for k, v in run.input_shapes.items())
    return _dl(
        [
            ("name", wl.get("name") or run.record.get("workload")),
            ("origin", wl.get("origin") or st.get("workload_ref")),
            ("model kind", wl.get("model_kind")),
            ("reference", wl.get("reference")),
            ("input shapes (per sample)", shapes or "not recorded (run folder gone)"),
            ("variable axes", wl.get("variable_axes") or None),
            ("batch axes (not 0)", wl.get("batch_axes") or None),
            ("constant inputs", ", ".join(wl.get("constants") or []) or None),
            ("batch sizes", ", ".join(map(str, st.get("batch_sizes") or []))),
            ("runtimes", ", ".join(st.get("runtimes") or [])),
            ("precisions", ", ".join(st.get("precisions") or [])),
            (
                "data",
                f"{wl['samples']} samples, {wl['quality_samples']} held out for quality"
                if "samples" in wl
                else None,
            ),
            (
                "quality gate",
                f"{wl['metric']}, max drop {wl['max_drop']:g}" if "metric" in wl else None,
            ),
            ("notes", "; ".join(wl.get("notes") or []) or None),
        ]
    )


def _method(run: StoredRun) -> str:
    st = run.settings
    doc = run.document or {}
    timing = doc.get("timing_s") or {}
    return _dl(
        [
            ("scenario", st.get("scenario")),
            ("mode", "--quick" if st.get("quick") else "full"),
            ("threads per runtime", st.get("threads")),
            ("warm-up", _warm_up(run)),
            (
                "samples",
                "interleaved rounds of timed calls; "
                + ", ".join(
                    f"{c['id']}: {c['latency_ms']['rounds']}×{c['latency_ms']['calls_per_round']}"
                    for c in run.candidates
                    if c.get("latency_ms")
                ),
            ),
            ("budget", f"{st['budget_s']} s" if st.get("budget_s") else "default"),
            ("equivalence margin", f"{st.get('margin', 0.02):.0%}"),
            ("cold starts", st.get("cold_starts")),
            ("seed", st.get("seed")),
            ("machine noise", _noise(doc.get("noise") or {})),
            (
                "time taken",
                f"{timing['total']:.0f} s (build {timing['build']:.0f} s, measure "
                f"{timing['measure']:.0f} s)"
                if "total" in timing
                else None,
            ),
        ]
    )


def _warm_up(run: StoredRun) -> str:
    warm = sorted(set(run.warmup_calls.values()))
    return (
        f"{warm[0]}–{warm[-1]} warm-up calls per candidate" if warm else "not recorded"
    ) + " (plus a settle slice before timing)"


def _noise(noise: dict[str, Any]) -> str | None:
    """What else the machine ran before, after and during the rounds (None: not recorded)."""
    if not noise:
        return None
    b, a = noise.get("before") or {}, noise.get("after") or {}
    text = (
        f"load average {_loads(b.get('load_average'))} before, "
        f"{_loads(a.get('load_average'))} after; "
        f"busy processes: {len(b.get('busy_processes') or [])} before, "
        f"{len(a.get('busy_processes') or [])} after"
    )
    for g in noise.get("during") or []:
        over = ", over it: results marked noisy" if g["busy"] else ""
        text += (
            f"; batch {g['batch_size']}: other processes used "
            f"{g['other_cores_mean']:.2f} cores on average during the rounds "
            f"(gate {g['gate_cores']:.2f}{over})"
        )
    return text


def _loads(loads: list[float] | None) -> str:
    """1, 5 and 15 minute load averages, rounded (older documents kept raw floats)."""
    return "not recorded" if not loads else " / ".join(f"{x:.2f}" for x in loads)


def _runtime_settings(run: StoredRun) -> str:
    rows = "".join(
        f"<tr><td>{_e(c['id'])}</td><td>{_e(_settings_text(c.get('settings') or {}))}</td></tr>"
        for c in run.candidates
        if c.get("settings")
    )
    if not rows:
        return "<p class='note'>No runtime settings were recorded.</p>"
    return (
        '<table id="runtime-settings"><tr><th>candidate</th><th>settings the runtime applied'
        f"</th></tr>{rows}</table>"
    )


def _settings_text(settings: dict[str, Any]) -> str:
    # a time in seconds to the microsecond is noise to a reader: three figures say it
    def shown(v: Any) -> str:
        return num(v) if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={shown(v)}" for k, v in sorted(settings.items()))
