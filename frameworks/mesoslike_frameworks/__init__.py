"""Bundled frameworks, installed as ``mesoslike_frameworks``.

They are built only on the public ``mesoslike`` API, the same one users have.
"""
