"""After a run: per piece of advice, whether the measurement confirmed it (true /
false / null with why). Advice is a hypothesis, the run is the test. This reads the
run's result document (its candidates, verdicts and settings), never a store.
"""

from __future__ import annotations

from typing import Any

from bakeoff.advise.rules_machine import SMALL_BASELINE_MS, format_ms, small_model_advice


def _batch1_p50(doc: dict[str, Any], cid: str | None) -> float | None:
    c = next((c for c in doc["candidates"] if c["id"] == cid), None)
    lat = c and c.get("latency_ms")
    return None if not lat else float(lat["p50"])


def _chosen_by(doc: dict[str, Any], key: str) -> str | None:
    """Who chose the run's runtimes or precisions, in words; None for a run stored
    before it recorded that."""
    settings = doc.get("settings") or {}
    source = (settings.get("grid_from") or {}).get(key)
    grid = ",".join(settings.get(key) or [])
    return {
        f"--{key}": f"by you (--{key} {grid})",
        "workload": f"by the workload ([search] {key} = {grid})",
        "defaults": f"by the defaults ({key} {grid})",
        "advice": f"by the advice (its grid of {key}: {grid})",
    }.get(source or "")


def not_measured_why(item: dict[str, Any], doc: dict[str, Any], excluded: list[dict]) -> str:
    """Who left a piece of advice out of the run, and why: the advice itself (an
    exclusion, with its reason), the workload's hand-written candidates, or the
    user's, workload's or defaults' choice of runtimes and precisions."""
    settings = doc.get("settings") or {}
    proposes = [tuple(p) for p in item.get("proposes") or []]
    if not proposes:
        why = "; ".join(str(w) for _, w in item.get("excludes") or [])
        return f"left out by the advice: {why}" if why else "nothing here to measure"
    hand_written = (settings.get("grid_from") or {}).get("runtimes") == "candidates"
    # (words before, words after) the things one reason leaves out -> those things
    reasons: dict[tuple[str, str], list[str]] = {}
    for runtime, precision in proposes:
        hit = next(
            (e for e in excluded if e["what"] in (runtime, precision, f"{runtime}-{precision}")),
            None,
        )
        both = f"{runtime} {precision}"
        grid = (("runtimes", runtime), ("precisions", precision))
        missing = next(((k, v) for k, v in grid if v not in (settings.get(k) or [])), None)
        if hit is not None:
            key, what = (f"left out by the advice: {hit['why']}", ""), ""
        elif hand_written:
            key, what = ("left out by the workload: its [[candidates]] include no ", ""), both
        elif runtime_why := (settings.get("left_out") or {}).get(runtime):
            key, what = (f"{runtime}: {runtime_why}", ""), ""  # a run's own rule (--quick)
        elif missing is not None:
            who = _chosen_by(doc, missing[0])
            key, what = ("", f" left out {who}" if who else " was not in the run"), missing[1]
        else:
            key, what = ("no ", " candidate was built"), both
        whats = reasons.setdefault(key, [])
        if what and what not in whats:
            whats.append(what)
    return "; ".join(f"{a}{' or '.join(w)}{b}" for (a, b), w in reasons.items())


def _standing(
    cands: list[dict[str, Any]], verdicts: list[dict[str, Any]]
) -> tuple[bool, str] | None:
    """Whether a proposed candidate leads, or is tied with the leader, at some batch
    size, in words that match the verdict: a leader not separated from the
    baseline does not confirm advice that something beats the baseline."""
    ids = {c["id"] for c in cands}
    against: tuple[bool, str] | None = None
    for v in verdicts:
        leader, base, bs = v.get("winner"), v.get("baseline"), v["batch_size"]
        tied = [t for group in v.get("ties", []) for t in group[1:]]
        hit = next((t for t in [leader, *tied] if t in ids), None)
        if hit is None:
            continue
        standing = v.get("standing") or "clear"  # a run stored before standings
        sp = v.get("speedup")
        if hit == leader and standing == "baseline-tied":
            against = against or (
                False,
                f"measured: {hit} leads at batch {bs}, but is not separated from the "
                f"baseline {base}",
            )
            continue
        if hit != leader and standing == "baseline-tied" and hit != base:
            against = against or (
                False,
                f"measured: {hit} is tied with the leader {leader} at batch {bs}, and "
                f"neither is separated from the baseline {base}",
            )
            continue
        if hit != leader:
            return True, f"measured: {hit} is tied with the leader {leader} at batch {bs}"
        if base == hit:
            return True, f"measured: {hit}, the baseline, leads at batch {bs}"
        gain = f", {sp['value']:.2f}× over the baseline {base}" if sp and base else ""
        if standing == "leads":
            return True, f"measured: {hit} leads at batch {bs}{gain}, tied with {', '.join(tied)}"
        return True, f"measured: {hit} is fastest at batch {bs}{gain}"
    return against


def _objective(c: dict[str, Any], objective: str) -> float | None:
    """A candidate's figure for a verdict's objective, higher is better."""
    if objective == "latency":
        lat = c.get("latency_ms")
        return 1.0 / lat["p50"] if lat and lat.get("p50") else None
    thr = c.get("throughput")
    return thr["samples_per_s"] if thr else None


def _not_the_leader(ok: list[dict[str, Any]], doc: dict[str, Any]) -> str:
    """What was measured of proposed candidates that ran but lead nowhere: the best of
    them against the baseline at each batch size, and who led there ("measured:
    torch-compile-fp32-b1 1.28× over the baseline torch-fp32-b1, not the leader
    openvino-int8-nncf-b1")."""
    by_id = {c["id"]: c for c in doc["candidates"]}
    said = []
    for v in doc.get("verdicts", []):
        base = by_id.get(v.get("baseline") or "")
        here = [c for c in ok if c["batch_size"] == v["batch_size"] and c["id"] != v["baseline"]]
        figures = [(_objective(c, v["objective"]), c["id"]) for c in here]
        scored = [(f, cid) for f, cid in figures if f is not None]
        base_figure = base and _objective(base, v["objective"])
        leader = f"not the leader {v['winner']}" if v.get("winner") else "no leader"
        if scored and base_figure:
            best, cid = max(scored)
            gain = f"{best / base_figure:.2f}× over the baseline {v['baseline']}"
            said.append(f"{cid} {gain}, {leader}")
        elif v.get("winner"):
            said.append(f"batch {v['batch_size']}: {leader}")
    return "measured: " + ("; ".join(said) or f"{ok[0]['id']} is ok but leads nowhere")


def _confirm_one(
    item: dict[str, Any], doc: dict[str, Any], excluded: list[dict] | None = None
) -> tuple[bool | None, str]:
    kind = item.get("confirm")
    if kind is None:
        return None, "nothing a run measures"
    verdicts = doc.get("verdicts", [])
    if kind == "small":
        v1 = next((v for v in verdicts if v["batch_size"] == 1), None)
        base = _batch1_p50(doc, v1 and v1["baseline"])
        win = _batch1_p50(doc, v1 and v1["winner"])
        if v1 is None or base is None or win is None:
            return None, "no batch-1 baseline and winner were measured"
        saved = base - win
        said = f"measured: the leader {v1['winner']} saves {format_ms(saved)} ms per call"
        return saved < 0.5, said
    wanted = {tuple(p) for p in item.get("proposes", [])}
    if kind == "runtime-wins":
        # Advice about where to deploy (a runtime) holds when that runtime wins at
        # whatever precision; advice about a precision needs that precision to win.
        runtimes = {r for r, _ in wanted}
        cands = [c for c in doc["candidates"] if c["runtime"] in runtimes]
    else:
        cands = [c for c in doc["candidates"] if (c["runtime"], c["precision"]) in wanted]
    if not cands:
        return None, not_measured_why(item, doc, excluded or [])
    ok = [c for c in cands if c["status"] == "ok"]
    if kind == "reference":
        if ok:
            return True, f"measured: {ok[0]['id']} built and ran as the reference"
        c = cands[0]
        return False, f"{c['id']} is {c['status']}: {c['reason']}"
    standing = _standing(cands, verdicts)
    if standing is not None:
        return standing
    if ok:
        return False, _not_the_leader(ok, doc)
    rejected = [c for c in cands if c["status"] == "rejected"]
    if rejected:
        c = rejected[0]
        q = c.get("quality") or {}
        drop = (
            f": {q['metric']} drop {q['drop']:.4g} > max {q['max_drop']:g}"
            if "drop" in q
            else f": {c['reason']}"
        )
        return False, f"{c['id']} was rejected by the quality gate{drop}"
    c = cands[0]
    return None, f"could not be measured: {c['id']} is {c['status']}: {c['reason']}"


def confirmations(report: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The result document's `advice` section: the advice and, per piece, whether
    the run confirmed it (true / false / null with why)."""
    items = list(report["advice"])
    ids = {a["id"] for a in items}
    # The ~1 ms rule needs a baseline; after a run there is one.
    v1 = next((v for v in doc.get("verdicts", []) if v["batch_size"] == 1), None)
    base = _batch1_p50(doc, v1 and v1["baseline"])
    if "small-model" not in ids and base is not None and base <= SMALL_BASELINE_MS:
        items.append(small_model_advice(base).to_dict())
    checked = []
    for item in items:
        confirmed, why = _confirm_one(item, doc, report.get("excluded") or [])
        checked.append({**item, "confirmed": confirmed, "why": why})
    return {**report, "advice": checked}
