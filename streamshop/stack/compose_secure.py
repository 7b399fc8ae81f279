"""The compose file's ``secure`` profile: the secured stack of `streamshop up --secure`, made by
two one-shot containers instead of the supervisor.

``streamshop secure setup`` (before the broker starts) makes the CA, the certificates (for the
hosts ``broker`` and ``registry``), every login and key under the shared ``secure`` volume, writes
the operator into the stopped broker's data directory, and writes one settings file per process
(``env/<process>.env``), which the process applies over its environment (`streamshop.env_file`).
``streamshop secure grant`` (once the broker is healthy, before the registry) logs in as the
operator and creates every other user and the ACLs of `ACCESS`, as the supervisor does.

Without the profile no settings file exists, and every process runs on its environment as the
compose file writes it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a subcommand runs: `streamshop --help` loads no cryptography
    from streamshop.stack.secure import SecureStack

__all__ = ["compose_env", "run", "setup"]

BROKER_HOST = "broker"
REGISTRY_HOST = "registry"
PORT = 9092
REGISTRY_PORT = 8081
HOSTS = (BROKER_HOST, REGISTRY_HOST, "localhost", "127.0.0.1")


def compose_env(stack: SecureStack) -> dict[str, dict[str, str]]:
    """Each compose service's settings in the secured run, by service name."""
    from streamshop.stack.plan import env_prefix
    from streamshop.stack.secure import ADMIN, HTTP_SERVICES, LOADTEST

    registry = f"https://{REGISTRY_HOST}:{REGISTRY_PORT}"
    broker = stack.broker_settings("0.0.0.0", PORT) | {
        "advertised.listeners": f"SASL_SSL://{BROKER_HOST}:{PORT}",
    }
    out = {
        "broker": {
            "BROKER_SET": ",".join(f"{k}={v}" for k, v in broker.items()),
            # The admin API has no login: in the secured run only the healthcheck reaches it.
            "BROKER_ADMIN_LISTEN": "127.0.0.1:9644",
        },
        "registry": stack.registry_env(),
    }
    for name in (*HTTP_SERVICES, "dashboard"):
        prefix = env_prefix(name)
        out[name] = stack.service_env(name, prefix) | {f"{prefix}_REGISTRY_URL": registry}
    login = f"analytics:{stack.registry_passwords['analytics']}@"
    out["analytics"] = stack.analytics_env() | {
        "ANALYTICS_REGISTRY_URL": f"https://{login}{REGISTRY_HOST}:{REGISTRY_PORT}"
    }
    out["locust"] = stack.kafka(LOADTEST).env("LOADTEST_") | {"STREAMSHOP_API_KEY": stack.api_keys[ADMIN]}
    return out


def setup(directory: Path, broker_data: Path | None) -> int:
    """Make (or keep) the secured stack's material and every process's settings file; how many
    settings files."""
    from broker.lock import DataDirInUse
    from streamshop.broker_users import set_offline
    from streamshop.env_file import format_env_file
    from streamshop.stack.secure import ADMIN, SecureStack
    from streamshop.stack.state import write_private

    stack = SecureStack.load_or_create(directory, HOSTS)
    settings = compose_env(stack)
    for name, values in settings.items():
        write_private(directory / "env" / f"{name}.env", format_env_file(values))
    if broker_data is not None:
        try:
            set_offline(broker_data, ADMIN, stack.kafka_passwords[ADMIN])
        except DataDirInUse:
            # `docker compose up` again while the broker runs: it already has its users.
            print(f"streamshop secure setup: the broker runs on {broker_data}; its users are kept", file=sys.stderr)
    return len(settings)


def grant(directory: Path, bootstrap: str, timeout: float) -> None:
    """Every principal's credentials and ACLs, as the operator; retried until `timeout`."""
    from streamshop.stack.secure import SecureStack, apply_access

    try:
        stack = SecureStack.load(directory)
    except FileNotFoundError:
        raise SystemExit(
            f"streamshop secure grant: no secured stack in {directory} (run `streamshop secure setup`)"
        ) from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            apply_access(bootstrap, stack)
            return
        except Exception as e:  # the Admin API's errors come as KafkaException and timeouts alike
            if time.monotonic() > deadline:
                raise SystemExit(f"streamshop secure grant: {bootstrap}: {e}") from None
            time.sleep(2)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if args.secure_action == "setup":
        if args.bootstrap != f"{BROKER_HOST}:{PORT}":
            print(
                f"streamshop secure setup: the secure profile secures the bundled broker ({BROKER_HOST}:{PORT}), "
                f"not {args.bootstrap}; a secured Apache Kafka cluster is `streamshop kafka-cluster start --secure`",
                file=sys.stderr,
            )
            return 2
        written = setup(directory, Path(args.broker_data) if args.broker_data else None)
        print(f"streamshop secure setup: {written} settings files in {directory / 'env'}")
        return 0
    from streamshop.stack.secure import ACCESS

    grant(directory, args.bootstrap, args.timeout)
    print(f"streamshop secure grant: {len(ACCESS)} principals and their ACLs on {args.bootstrap}")
    return 0
