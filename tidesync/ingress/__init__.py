"""Shore sync API /sync/v1/*: node authentication, decoding, limits, durable receive.

Receipts, commands, acks, heartbeat and config endpoints live here.
"""
