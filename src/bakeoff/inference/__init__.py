"""The inference bake-off: options, variants (built once, the reference first),
the quality gate, the scenarios after the rounds, resume, the result document,
and the pipeline that runs them in order on the trial engine (`bakeoff.trials`)."""
