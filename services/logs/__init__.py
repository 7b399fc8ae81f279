"""The logs service: consumer group ``log-indexer`` indexes every service's log lines from the
``logs.*`` topics into SQLite (FTS5 full-text search) and serves them over HTTP (``GET /logs``,
``GET /logs/stats``)."""
