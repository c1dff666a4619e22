"""The training bake-off: one recipe on every training stack, through the same trial
engine as inference (each stack's worker holds its model and optimizer and runs K
steps per round, rounds interleaved), then each seed trained to the end of the
recipe in a fresh worker of its own. Its parts: the recipe, the options, the
workers' specs, the first-loss gate, the scaling references, the throughput
figures, the verdicts, the result document, resume, and the pipeline that runs
them in order."""
