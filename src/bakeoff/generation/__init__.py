"""The generative bake-off: which stack writes this language model's greedy text
fastest on this machine, without changing what it writes (`pipeline`), on the
trial engine with a candidate of its own (`candidate`)."""
