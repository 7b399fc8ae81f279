"""The otp service: one-time codes over HTTP, OtpRequested to ``otp.requests`` through the outbox."""
