"""Files on disk (I/O): the experiment's file bundle, a run's workspace archive, and
the change summary of a workspace.
"""
