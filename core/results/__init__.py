"""What a run and an experiment produce: the base Record every model shares, a
run's RunResult, a parsed Transcript, and the ExperimentReport. Pure models.
"""
