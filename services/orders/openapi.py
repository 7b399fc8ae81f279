"""The orders API as OpenAPI 3.1 (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

from kit.openapi import document, json_body, obj, operation, path_parameter
from services.orders.domain import CREATE_ORDER, LIST_QUERY, STATUS_CHANGE, OrderStatus
from services.orders.handlers import IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER

__all__ = ["ORDERS_OPENAPI"]

_MONEY = {"type": "string", "pattern": r"^-?[0-9]+\.[0-9]+$", "examples": ["25.00"]}
_TIME = {"type": "string", "format": "date-time"}
_STATUS = {"type": "string", "enum": [s.value for s in OrderStatus]}

ORDER: dict[str, Any] = obj(
    {
        "order_id": {"type": "string", "format": "uuid"},
        "customer_id": {"type": "string"},
        "status": _STATUS,
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "total": _MONEY,
        "items": {
            "type": "array",
            "items": obj(
                {"sku": {"type": "string"}, "quantity": {"type": "integer"}, "unit_price": _MONEY, "amount": _MONEY}
            ),
        },
        "allowed_transitions": {"type": "array", "items": _STATUS},
        "created_at": _TIME,
        "updated_at": _TIME,
        "history": {
            "type": "array",
            "items": obj(
                {
                    "from": {"anyOf": [_STATUS, {"type": "null"}]},
                    "to": _STATUS,
                    "reason": {"type": ["string", "null"]},
                    "at": _TIME,
                }
            ),
        },
    }
)

_ORDER_ID = path_parameter("order_id", {"type": "string"}, "the order's id (a UUID; anything else is not found)")

ORDERS_OPENAPI = document(
    "orders",
    "Orders: create, read and list them, and move them through created -> paid -> shipped -> delivered "
    "(cancelled before shipping).  Every change is published as an Avro event to the topic `orders` "
    "through a transactional outbox.  Money is a decimal string; currencies are ISO 4217 codes.",
    {
        "/orders": {
            "post": operation(
                "create_order",
                "create an order (a retry with the same Idempotency-Key and body returns the same order)",
                {201: ORDER},
                body=json_body(CREATE_ORDER),
                parameters=[
                    {
                        "name": IDEMPOTENCY_KEY_HEADER,
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
                    }
                ],
                headers={201: {"Location": {"type": "string"}, REPLAYED_HEADER: {"const": "true"}}},
            ),
            "get": operation(
                "list_orders",
                "a customer's orders, newest first",
                {200: obj({"items": {"type": "array", "items": ORDER}, "count": {"type": "integer", "minimum": 0}})},
                parameters=LIST_QUERY.parameters(),
                errors=(422,),
            ),
        },
        "/orders/{order_id}": {
            "get": operation("get_order", "one order", {200: ORDER}, parameters=[_ORDER_ID], errors=(404,)),
        },
        "/orders/{order_id}/status": {
            "post": operation(
                "change_order_status",
                'move an order to another status: body {"status": "paid"}, optionally with a "reason"; '
                "409 names the moves allowed from the current status",
                {200: ORDER},
                parameters=[_ORDER_ID],
                body=json_body(STATUS_CHANGE),
                errors=(404, 409),
            ),
        },
    },
)
