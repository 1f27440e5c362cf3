"""Evaluating a finished run (I/O): gates run as subprocesses, the judge over HTTP,
and the whole evaluation of a workspace and transcript into a RunResult.
"""
