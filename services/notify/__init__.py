"""The OTP senders: consumer groups ``sms-sender`` and ``email-sender`` each read every
OtpRequested of ``otp.requests`` (fan-out), open the sealed code, hand it to their provider (an
SMS webhook or file sink; an SMTP server) and publish OtpDelivered / OtpFailed to
``otp.deliveries`` through the transactional outbox."""
