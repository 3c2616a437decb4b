"""Change data capture records (Debezium format) and their normalisation into ChangeEvents,
shared by the ship client and the shore CDC consumer."""
