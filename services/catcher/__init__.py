"""The local SMTP catcher and SMS sink of the demo stack: mails sent to its SMTP port and SMS
posted to ``/sms`` are kept in memory and listed over HTTP (like MailHog or Mailpit)."""
