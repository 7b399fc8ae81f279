"""Persistence of orders (SQLite or PostgreSQL: services.common.db); every state change writes its
event to the outbox in the same transaction (services.common.outbox), so an order and its event
are committed together."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kit.tracing import current_context, kafka_headers
from services.common.db import Database, Migration, Session, Step
from services.common.outbox import Outbox
from services.orders.domain import (
    IdempotencyKeyReused,
    LineItem,
    NewOrder,
    OrderId,
    OrderStatus,
    allowed_transitions,
    check_transition,
    money_out,
    order_total,
)

__all__ = ["MIGRATIONS", "Order", "OrderStore", "StatusChange"]

MIGRATIONS: Sequence[Migration] = (
    Step(
        sqlite="""
        CREATE TABLE orders (
            id TEXT PRIMARY KEY,
            customer_id TEXT NOT NULL,
            currency TEXT NOT NULL,
            status TEXT NOT NULL,
            total TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            idempotency_key TEXT UNIQUE,
            request_hash TEXT
        );
        CREATE INDEX orders_by_customer ON orders (customer_id, created_at DESC);
        CREATE TABLE order_items (
            order_id TEXT NOT NULL REFERENCES orders (id),
            line INTEGER NOT NULL,
            sku TEXT NOT NULL,
            quantity INTEGER NOT NULL,
            unit_price TEXT NOT NULL,
            PRIMARY KEY (order_id, line)
        ) WITHOUT ROWID;
        CREATE TABLE order_history (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            order_id TEXT NOT NULL REFERENCES orders (id),
            from_status TEXT,
            to_status TEXT NOT NULL,
            reason TEXT,
            changed_at INTEGER NOT NULL
        );
        CREATE INDEX order_history_by_order ON order_history (order_id, id);
        """,
        postgresql="""
        CREATE TABLE orders (
            id TEXT PRIMARY KEY,
            customer_id TEXT NOT NULL,
            currency TEXT NOT NULL,
            status TEXT NOT NULL,
            total TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            idempotency_key TEXT UNIQUE,
            request_hash TEXT
        );
        CREATE INDEX orders_by_customer ON orders (customer_id, created_at DESC);
        CREATE TABLE order_items (
            order_id TEXT NOT NULL REFERENCES orders (id),
            line INTEGER NOT NULL,
            sku TEXT NOT NULL,
            quantity INTEGER NOT NULL,
            unit_price TEXT NOT NULL,
            PRIMARY KEY (order_id, line)
        );
        CREATE TABLE order_history (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            order_id TEXT NOT NULL REFERENCES orders (id),
            from_status TEXT,
            to_status TEXT NOT NULL,
            reason TEXT,
            changed_at BIGINT NOT NULL
        );
        CREATE INDEX order_history_by_order ON order_history (order_id, id);
        """,
    ),
)


@dataclass(frozen=True, slots=True)
class StatusChange:
    from_status: OrderStatus | None
    to_status: OrderStatus
    reason: str | None
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class Order:
    id: OrderId
    customer_id: str
    currency: str
    status: OrderStatus
    total: Decimal
    items: tuple[LineItem, ...]
    created_at: datetime
    updated_at: datetime
    history: tuple[StatusChange, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "order_id": self.id,
            "customer_id": self.customer_id,
            "status": str(self.status),
            "currency": self.currency,
            "total": money_out(self.total),
            "items": [
                {
                    "sku": i.sku,
                    "quantity": i.quantity,
                    "unit_price": money_out(i.unit_price),
                    "amount": money_out(i.amount),
                }
                for i in self.items
            ],
            "allowed_transitions": [str(s) for s in allowed_transitions(self.status)],
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "history": [
                {
                    "from": None if h.from_status is None else str(h.from_status),
                    "to": str(h.to_status),
                    "reason": h.reason,
                    "at": _iso(h.changed_at),
                }
                for h in self.history
            ],
        }


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _now() -> datetime:
    # Millisecond precision: what the events (timestamp-millis) and the database keep.
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _request_hash(order: NewOrder) -> str:
    return hashlib.sha256(order.fingerprint_source().encode()).hexdigest()


class OrderStore:
    """Orders in `db`; events go to `outbox` for `topic`, keyed by order id."""

    def __init__(self, db: Database, outbox: Outbox, *, topic: str, service: str, instance: str) -> None:
        self.db = db
        self.outbox = outbox
        self.topic = topic
        self._producer = {"service": service, "instance": instance}

    async def setup(self) -> None:
        await self.outbox.setup()
        await self.db.migrate("orders", MIGRATIONS)

    def _envelope(self, occurred_at: datetime) -> dict[str, Any]:
        ctx = current_context()
        return {
            "event_id": str(uuid.uuid4()),
            "occurred_at": occurred_at,
            "producer": dict(self._producer),
            "trace_id": ctx.trace.trace_id if ctx is not None else None,
        }

    async def create(self, new: NewOrder, idempotency_key: str | None = None) -> tuple[Order, bool]:
        """Store a new order and its OrderCreated event; returns (order, created).  With an
        `idempotency_key` already used for the same body, returns that order and `created=False`
        (nothing is written or published); with another body, `IdempotencyKeyReused`."""
        request_hash = _request_hash(new)
        order_id = OrderId(str(uuid.uuid4()))
        now = _now()
        total = order_total(new.items)
        record = {
            "envelope": self._envelope(now),
            "order_id": order_id,
            "customer_id": new.customer_id,
            "items": [
                {"sku": i.sku, "quantity": i.quantity, "unit_price": i.unit_price.quantize(Decimal("0.0001"))}
                for i in new.items
            ],
            "total": total,
            "currency": new.currency,
            "created_at": now,
        }
        event = self.outbox.prepare(self.topic, order_id, "OrderCreated", record, kafka_headers())

        async def write(s: Session) -> Order | None:
            """The existing order of a replayed idempotency key, or None once the new one is written."""
            if idempotency_key is not None:
                # Two instances given the same key at once: the second waits, then finds the first's order.
                await s.lock(f"orders.idempotency:{idempotency_key}")
                row = await s.fetchone(
                    "SELECT id, request_hash FROM orders WHERE idempotency_key = ?", (idempotency_key,)
                )
                if row is not None:
                    if row["request_hash"] != request_hash:
                        raise IdempotencyKeyReused(details={"order_id": row["id"]})
                    return await _load(s, OrderId(row["id"]))
            # Inserts nothing here reads back: on PostgreSQL they travel with those of the other
            # orders group-committed with this one (Session.insert), one round trip per statement.
            await s.insert(
                "INSERT INTO orders (id, customer_id, currency, status, total, created_at, updated_at,"
                " idempotency_key, request_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    order_id,
                    new.customer_id,
                    new.currency,
                    OrderStatus.CREATED.value,
                    str(total),
                    _ms(now),
                    _ms(now),
                    idempotency_key,
                    request_hash if idempotency_key is not None else None,
                ),
            )
            for n, i in enumerate(new.items):
                await s.insert(
                    "INSERT INTO order_items (order_id, line, sku, quantity, unit_price) VALUES (?, ?, ?, ?, ?)",
                    (order_id, n, i.sku, i.quantity, str(i.unit_price)),
                )
            await s.insert(
                "INSERT INTO order_history (order_id, from_status, to_status, reason, changed_at)"
                " VALUES (?, NULL, ?, NULL, ?)",
                (order_id, OrderStatus.CREATED.value, _ms(now)),
            )
            await event.write(s)
            return None

        existing = await self.db.write(write)
        if existing is not None:
            return existing, False
        self.outbox.wake()
        order = Order(
            order_id,
            new.customer_id,
            new.currency,
            OrderStatus.CREATED,
            total,
            new.items,
            now,
            now,
            (StatusChange(None, OrderStatus.CREATED, None, now),),
        )
        return order, True

    async def change_status(self, order_id: OrderId, to_status: OrderStatus, reason: str | None) -> Order | None:
        """Move the order to `to_status` and write OrderStatusChanged; None when there is no such
        order; `InvalidTransition` (409) when the state machine does not allow it."""
        now = _now()
        envelope = self._envelope(now)
        headers = kafka_headers()

        async def write(s: Session) -> Order | None:
            # Changes of one order one at a time, across instances: each reads the status the
            # previous one left, and their events enter the outbox in the order they happened.
            await s.lock(f"orders.order:{order_id}")
            row = await s.fetchone("SELECT status FROM orders WHERE id = ?", (order_id,))
            if row is None:
                return None
            current = OrderStatus(row["status"])
            check_transition(current, to_status)
            record = {
                "envelope": envelope,
                "order_id": order_id,
                "from_status": current.value,
                "to_status": to_status.value,
                "reason": reason,
                "changed_at": now,
            }
            # Encoded here, in the writer thread: the record depends on the status just read.
            event = self.outbox.prepare(self.topic, order_id, "OrderStatusChanged", record, headers)
            await s.execute(
                "UPDATE orders SET status = ?, updated_at = ? WHERE id = ?", (to_status.value, _ms(now), order_id)
            )
            await s.execute(
                "INSERT INTO order_history (order_id, from_status, to_status, reason, changed_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (order_id, current.value, to_status.value, reason, _ms(now)),
            )
            await event.write(s)
            return await _load(s, order_id)

        order = await self.db.write(write)
        if order is not None:
            self.outbox.wake()
        return order

    async def get(self, order_id: OrderId) -> Order | None:
        return await self.db.read(lambda s: _load(s, order_id))

    async def by_customer(self, customer_id: str, status: OrderStatus | None, limit: int) -> list[Order]:
        """The customer's orders, newest first."""
        sql = "SELECT id FROM orders WHERE customer_id = ?"
        params: list[Any] = [customer_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status.value)
        sql += " ORDER BY created_at DESC, id LIMIT ?"

        async def read(s: Session) -> list[Order]:
            rows = await s.fetchall(sql, (*params, limit))
            orders = [await _load(s, OrderId(r["id"])) for r in rows]
            return [o for o in orders if o is not None]

        return await self.db.read(read)


async def _load(s: Session, order_id: OrderId) -> Order | None:
    """The order with its items and history (three queries)."""
    row = await s.fetchone("SELECT * FROM orders WHERE id = ?", (order_id,))
    if row is None:
        return None
    items = await s.fetchall(
        "SELECT sku, quantity, unit_price FROM order_items WHERE order_id = ? ORDER BY line", (order_id,)
    )
    history = await s.fetchall(
        "SELECT from_status, to_status, reason, changed_at FROM order_history WHERE order_id = ? ORDER BY id",
        (order_id,),
    )
    return Order(
        OrderId(row["id"]),
        row["customer_id"],
        row["currency"],
        OrderStatus(row["status"]),
        Decimal(row["total"]),
        tuple(LineItem(i["sku"], i["quantity"], Decimal(i["unit_price"])) for i in items),
        _dt(row["created_at"]),
        _dt(row["updated_at"]),
        tuple(
            StatusChange(
                None if h["from_status"] is None else OrderStatus(h["from_status"]),
                OrderStatus(h["to_status"]),
                h["reason"],
                _dt(h["changed_at"]),
            )
            for h in history
        ),
    )
