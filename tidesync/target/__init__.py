"""Business databases as targets: compare-and-set appliers with an applied-event ledger,
used by the shore apply processor and by the ship's remote applier."""
