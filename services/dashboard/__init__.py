"""The dashboard: one live page of the cluster (topics, offsets, sizes, rates), the consumer
groups (members, assignments, lag, rebalances), the analytics job's metrics, the SMTP catcher's
inbox and the logs service's live tail.  It reads Kafka over the Kafka protocol only, so it
works against the bundled broker and an Apache Kafka cluster alike."""
