"""Ship client: capture adapters, queue consumer, normalizer, state store, scheduler.

Transport, remote applier and telemetry complete the ship side.
"""
