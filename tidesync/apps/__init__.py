"""The write model: one eventsourcing Application per aggregate family (`...Application`), each
in its own events table, with the services that load an aggregate, let it decide and save it.
"""
