"""Consumer groups: the shard of `__consumer_offsets` (coordinator.py) composing group
membership (membership.py, the classic and consumer group protocols) and committed offsets
(offsets.py)."""
