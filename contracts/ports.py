"""The stack's default ports: every process's own default and every client's default target."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_PORTS"]

DEFAULT_PORTS: Mapping[str, int] = {
    "broker": 9092,
    "broker-admin": 9644,
    "registry": 8081,
    "orders": 8001,
    "otp": 8002,
    "logs": 8003,
    "sms-sender": 8004,
    "email-sender": 8005,
    "catcher": 8025,
    "dashboard": 8080,
    "smtp": 1025,
    "locust": 8089,
}
