"""Shore workers: apply processor, target applier, conflict arbiter, downlink, shore CDC.

Also the composition of the shore server process.
"""
