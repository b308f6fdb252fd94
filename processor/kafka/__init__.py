"""The one Kafka layer: client configs, topic admin, end offsets, produce with retry, sinks, delivery
guarantees and the embedded Apache Kafka broker. Imports only processor.core."""
