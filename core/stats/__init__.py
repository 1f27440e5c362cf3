"""Statistics over numbers: descriptive figures, intervals and significance tests.
Pure and deterministic.
"""
