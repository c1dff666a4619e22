"""Judging measured figures: statistics, the quality gate and the verdict.

Pure functions on numbers and frozen dataclasses, the lowest floor of the code:
nothing here imports a runtime, a worker, the store or the reports.
"""
