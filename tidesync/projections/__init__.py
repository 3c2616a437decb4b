"""Read models built from the shore event streams, the projection engine and rebuilds.

Views: record_head, receipts, backlog/ETA, conflict center, node overview, audit.
"""
