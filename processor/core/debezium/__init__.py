"""Debezium-compatible output: typed per-table schemas and Debezium's envelope, key and metadata.

Pure: column types (types.py), per-table schemas with versions (schemas.py), record building per
connector family (envelope.py, source_blocks.py), the Kafka Connect JSON rendering (connect_json.py)
and the Avro schema of a Connect schema (avro.py). The runtime's Debezium sink does the I/O.
"""
