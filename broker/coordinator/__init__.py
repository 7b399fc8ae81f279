"""Consumer groups: membership (the classic protocol state machine) and committed offsets."""
