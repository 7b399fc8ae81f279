"""The orders service: HTTP API over SQLite, OrderCreated / OrderStatusChanged through the outbox."""
