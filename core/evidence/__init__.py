"""What a run leaves to explain itself: the evidence models, their caps, events for
the transcript view, and the one redactor every stored text passes. Pure.
"""
