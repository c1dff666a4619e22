"""The one trial engine: candidates run in worker processes, timed in randomized
interleaved rounds, raced, and judged for validity (docs/method.md).

What a trial is made of comes from above: a typed job per candidate (`jobs`), a
`Gate` that a freshly started worker must pass, a `Launcher` that starts workers
(local processes, `launcher`), the settings and an event sink (`engine`). The
worker side (`worker`, `loadgen`) imports nothing from here but `jobs`.
"""
