"""The Spark stage: Kafka source (native or Python), ChangeEvent decoding, exactly-once sinks."""
