"""Settings of the catcher, from ``CATCHER_*`` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from services.common.config import DEFAULT_PORTS, ConfigError, ServiceConfig, secret, setting

__all__ = ["CatcherConfig"]


@dataclass(frozen=True, repr=False)
class CatcherConfig(ServiceConfig):
    """`CatcherConfig.from_env()` reads CATCHER_PORT, CATCHER_SMTP_PORT, CATCHER_MAX_MESSAGES...

    Everything is kept in memory: a restart empties the mailbox and the SMS list (as MailHog's
    default in-memory storage does).  The catcher needs neither broker nor registry; it ships its
    own logs only when ``CATCHER_LOG_SHIPPING`` is turned on (then the broker and registry must be up).
    """

    service_name: ClassVar[str] = "catcher"

    port: int = setting(DEFAULT_PORTS["catcher"], help="HTTP port")
    smtp_port: int = setting(DEFAULT_PORTS["smtp"], help="SMTP port (same interface as `listen`)")
    smtp_hostname: str = setting("streamshop-catcher", help="host name in the SMTP greeting")
    max_messages: int = setting(10_000, help="mails kept, and SMS kept; the oldest go first")
    max_message_size: int = setting(10 * 1024 * 1024, help="largest mail accepted (SMTP SIZE), bytes")
    sms_token: str | None = secret(help="when set, POST /sms needs 'Authorization: Bearer <token>'")
    log_shipping: bool = setting(False, help="ship own logs to the logs.* topics (needs the broker)")

    def check(self) -> None:
        problems = [
            f"{self.env_name(name)}: must be positive"
            for name, value in (("max_messages", self.max_messages), ("max_message_size", self.max_message_size))
            if value <= 0
        ]
        if not 0 <= self.smtp_port < 65536:
            problems.append(f"{self.env_name('smtp_port')}: must be a TCP port")
        if problems:
            raise ConfigError(problems)
