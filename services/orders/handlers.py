"""HTTP handlers of the orders API (routes are added by services.orders.app)."""

from __future__ import annotations

import re
import uuid

from aiohttp import web

from kit.app import read_json
from kit.errors import NotFound, ValidationError
from services.orders.domain import CREATE_ORDER, LIST_QUERY, STATUS_CHANGE, NewOrder, OrderId, OrderStatus
from services.orders.store import OrderStore

__all__ = [
    "IDEMPOTENCY_KEY_HEADER",
    "LIST_LIMIT_KEY",
    "REPLAYED_HEADER",
    "STORE_KEY",
    "change_status",
    "create_order",
    "get_order",
    "list_orders",
]

STORE_KEY = web.AppKey("order_store", OrderStore)
LIST_LIMIT_KEY = web.AppKey("list_limit_max", int)
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII, no spaces


def _order_id(request: web.Request) -> OrderId:
    raw = request.match_info["order_id"]
    try:
        return OrderId(str(uuid.UUID(raw)))
    except ValueError:
        raise NotFound(f"no order {raw}", details={"order_id": raw}) from None


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ValidationError({f"headers.{IDEMPOTENCY_KEY_HEADER}": "must be 1 to 255 visible ASCII characters"})
    return key


async def create_order(request: web.Request) -> web.Response:
    """`POST /orders`: 201 with the order; a retry with the same Idempotency-Key and body gets the
    same order and status (header ``Idempotent-Replayed: true``) and publishes nothing."""
    key = _idempotency_key(request)
    new = NewOrder.from_cleaned(CREATE_ORDER.validate(await read_json(request)))
    order, created = await request.app[STORE_KEY].create(new, key)
    headers = {"Location": f"/orders/{order.id}"}
    if not created:
        headers[REPLAYED_HEADER] = "true"
    return web.json_response(order.to_json(), status=201, headers=headers)


async def get_order(request: web.Request) -> web.Response:
    order_id = _order_id(request)
    order = await request.app[STORE_KEY].get(order_id)
    if order is None:
        raise NotFound(f"no order {order_id}", details={"order_id": order_id})
    return web.json_response(order.to_json())


async def list_orders(request: web.Request) -> web.Response:
    """`GET /orders?customer_id=...[&status=...][&limit=N]`: the customer's orders, newest first."""
    query = LIST_QUERY.validate(dict(request.query))
    limit = int(query["limit"])
    maximum = request.app[LIST_LIMIT_KEY]
    if limit > maximum:
        raise ValidationError({"limit": f"must be at most {maximum}"})
    status = OrderStatus(query["status"]) if query["status"] is not None else None
    orders = await request.app[STORE_KEY].by_customer(query["customer_id"], status, limit)
    return web.json_response({"items": [o.to_json() for o in orders], "count": len(orders)})


async def change_status(request: web.Request) -> web.Response:
    """`POST /orders/{id}/status` ``{"status": ..., "reason": ...}``: 200 with the order, 409 with
    the allowed statuses when the state machine refuses, 404 for an unknown order."""
    order_id = _order_id(request)
    body = STATUS_CHANGE.validate(await read_json(request))
    order = await request.app[STORE_KEY].change_status(order_id, OrderStatus(body["status"]), body["reason"])
    if order is None:
        raise NotFound(f"no order {order_id}", details={"order_id": order_id})
    return web.json_response(order.to_json())
