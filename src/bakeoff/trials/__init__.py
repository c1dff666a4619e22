"""The one trial engine: candidates run in worker processes, timed in randomized
interleaved rounds, raced, and judged for validity (docs/method.md).

Nothing here knows a kind of bake-off. What a trial is made of comes from above:
a typed job per candidate (each kind's `messages`, on the envelope in `jobs`),
a `Gate` that a freshly started worker must pass, a `Launcher` that starts
workers (local processes, `launcher`, each running the module its job names),
the settings and an event sink (`engine`). Each kind's worker module runs the one
loop in `worker`, which imports nothing from here but `jobs` and `launcher`'s
names.
"""
