"""Test doubles that let the agent's real code paths run where the real services are out of reach.

Nothing here is used by the agent itself: the notebooks and tests reach for it when no chat model
endpoint can be called, and every answer it gives is labelled as scripted.
"""
