"""Built-in capture: row changes of a MySQL/MariaDB binlog or a SQLite changelog, written as
Debezium-format envelopes into Kafka-API topics. Ships run it where Kafka Connect is not run,
and the shore runs it on its own business database for the downlink.
"""
