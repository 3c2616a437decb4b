"""The composition root: turns the configuration into processes (shore server, shore worker,
ship client, capture, console, demo). The only package that reads `tidesync.config` and picks
adapters; the layers receive their collaborators and settings from here.
"""
