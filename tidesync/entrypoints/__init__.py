"""Entry points: the `tidesync` command line, the shore HTTP app and the demo. Thin: they parse
what the user asked and call the composition root (`tidesync.bootstrap`).
"""
