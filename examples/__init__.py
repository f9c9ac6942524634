"""Examples of external consumers of Switchboard's Kafka topics; they use only the published schemas."""
