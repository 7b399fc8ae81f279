"""The `postgres` profile (`--env-file compose/postgres.env --profile bundled --profile
postgres`): every service with state on one PostgreSQL server, a database each.  An order
POSTed on :8001 is a row of the orders database and an event on `orders`; an OTP still reaches
both senders; the data survives `down` and `up` in the server's named volume."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.compose.conftest import FIGURES, running
from tests.compose.stackcheck import ORDERS, http, otp_delivered, post_order, read_orders
from tests.support.docker import LOCAL_ENV, Compose
from tests.support.harness import REPO

pytestmark = pytest.mark.compose


@pytest.fixture(scope="module")
def stack(docker_host: str, images: None) -> Iterator[Compose]:
    project = Compose(
        docker_host,
        "streamshop-test",
        profiles=("bundled", "postgres"),
        env_files=(REPO / ".env", REPO / "compose" / "postgres.env", LOCAL_ENV),
    )
    with running(project, "up --wait, postgres profile") as up:
        yield up


def rows(stack: Compose, database: str, sql: str) -> str:
    return stack.exec("postgres", "psql", "-U", "streamshop", "-d", database, "-tAc", sql).strip()


def test_an_order_is_a_row_in_postgresql_and_an_event_on_orders(stack: Compose) -> None:
    order_id = post_order(0)
    assert rows(stack, "orders", f"SELECT count(*) FROM orders WHERE id = '{order_id}'") == "1"
    assert read_orders(stack, {order_id}).keys() == {order_id}
    otp_delivered()
    # Nothing went to the SQLite files the services would use without compose/postgres.env.
    listed = stack.exec("orders", "ls", "/var/lib/streamshop/orders").split()
    assert not [name for name in listed if name.endswith(".db")], listed

    stack("down", "--timeout", "20")
    FIGURES["up --wait, postgres profile (volumes kept)"] = f"{stack.up():.0f} s"
    status, order = http("GET", f"{ORDERS}/orders/{order_id}")
    assert status == 200, order
