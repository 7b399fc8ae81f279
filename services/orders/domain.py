"""Order rules, free of I/O: the status state machine, money arithmetic and input schemas."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, ClassVar, NewType

from kit.errors import Conflict, ServiceError
from kit.validation import DecimalStr, Enum, Int, List, Object, Str
from services.orders.currencies import ISO_4217

__all__ = [
    "CREATE_ORDER",
    "LIST_QUERY",
    "STATUS_CHANGE",
    "TRANSITIONS",
    "IdempotencyKeyReused",
    "InvalidTransition",
    "LineItem",
    "NewOrder",
    "OrderId",
    "OrderStatus",
    "allowed_transitions",
    "check_transition",
    "money_out",
    "order_total",
]

OrderId = NewType("OrderId", str)

MONEY_SCALE = Decimal("0.0001")  # Avro decimal(18,4): schemas/README.md
OUTPUT_PLACES = Decimal("0.01")
MAX_UNIT_PRICE = Decimal(1_000_000)
MAX_QUANTITY = 10_000
MAX_ITEMS = 100  # with the two bounds above a total stays far inside decimal(18,4)


class OrderStatus(enum.StrEnum):
    """The statuses, spelled as the Avro enum symbols (lower case)."""

    CREATED = "created"
    PAID = "paid"
    SHIPPED = "shipped"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


# created -> paid -> shipped -> delivered; cancelled from any status before shipping.
TRANSITIONS: Mapping[OrderStatus, tuple[OrderStatus, ...]] = {
    OrderStatus.CREATED: (OrderStatus.PAID, OrderStatus.CANCELLED),
    OrderStatus.PAID: (OrderStatus.SHIPPED, OrderStatus.CANCELLED),
    OrderStatus.SHIPPED: (OrderStatus.DELIVERED,),
    OrderStatus.DELIVERED: (),
    OrderStatus.CANCELLED: (),
}


class InvalidTransition(Conflict):
    """409: the order's current status does not allow the requested one."""

    code = "invalid_transition"

    def __init__(self, current: OrderStatus, requested: OrderStatus) -> None:
        allowed = [str(s) for s in TRANSITIONS[current]]
        super().__init__(
            f"an order in status {current} cannot move to {requested}"
            + (f" (allowed: {', '.join(allowed)})" if allowed else f" ({current} is final)"),
            details={"from": str(current), "to": str(requested), "allowed": allowed},
        )


class IdempotencyKeyReused(ServiceError):
    """422 (as in the IETF Idempotency-Key draft): the key was used before with another body."""

    status: ClassVar[int] = 422
    code: ClassVar[str] = "idempotency_key_reused"
    default_message: ClassVar[str] = "this Idempotency-Key was already used with a different request body"


def allowed_transitions(current: OrderStatus) -> tuple[OrderStatus, ...]:
    return TRANSITIONS[current]


def check_transition(current: OrderStatus, requested: OrderStatus) -> None:
    """Raise `InvalidTransition` unless `current -> requested` is an edge of the state machine."""
    if requested not in TRANSITIONS[current]:
        raise InvalidTransition(current, requested)


@dataclass(frozen=True, slots=True)
class LineItem:
    sku: str
    quantity: int
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        return self.quantity * self.unit_price


@dataclass(frozen=True, slots=True)
class NewOrder:
    """A validated `POST /orders` body."""

    customer_id: str
    currency: str
    items: tuple[LineItem, ...]

    @classmethod
    def from_cleaned(cls, body: Mapping[str, Any]) -> NewOrder:
        items = tuple(LineItem(i["sku"], i["quantity"], i["unit_price"]) for i in body["items"])
        return cls(body["customer_id"], body["currency"], items)

    def fingerprint_source(self) -> str:
        """A canonical text of the request (for Idempotency-Key body comparison): prices are
        normalised, so ``"12.5"`` and ``"12.50"`` are the same request."""
        lines = ";".join(f"{i.sku}|{i.quantity}|{i.unit_price.quantize(MONEY_SCALE)}" for i in self.items)
        return f"{self.customer_id}\n{self.currency}\n{lines}"


def order_total(items: Sequence[LineItem]) -> Decimal:
    """Sum of quantity * unit_price, exact at the stored scale (4 places)."""
    return sum((i.amount for i in items), Decimal(0)).quantize(MONEY_SCALE)


def money_out(amount: Decimal) -> str:
    """Money for JSON output: a decimal string rounded half-up to 2 places (``"25.00"``)."""
    return str(amount.quantize(OUTPUT_PLACES, rounding=ROUND_HALF_UP))


CREATE_ORDER = Object(
    {
        "customer_id": Str(min_len=1, max_len=128, strip=True),
        "currency": Str(
            pattern=r"[A-Z]{3}",
            pattern_message="must be an upper-case ISO 4217 code such as EUR",
            allowed=ISO_4217,
            allowed_message="is not an ISO 4217 currency code",
        ),
        "items": List(
            Object(
                {
                    "sku": Str(min_len=1, max_len=64, strip=True),
                    "quantity": Int(minimum=1, maximum=MAX_QUANTITY),
                    "unit_price": DecimalStr(minimum=Decimal(0), maximum=MAX_UNIT_PRICE, places=4),
                }
            ),
            min_items=1,
            max_items=MAX_ITEMS,
        ),
    }
)

STATUS_CHANGE = Object(
    {
        "status": Enum(*(s.value for s in OrderStatus if s is not OrderStatus.CREATED)),
        "reason": Str(required=False, nullable=True, max_len=500),
    }
)

LIST_QUERY = Object(
    {
        "customer_id": Str(min_len=1, max_len=128),
        "status": Enum(*(s.value for s in OrderStatus), required=False),
        "limit": Str(
            required=False, pattern=r"[1-9][0-9]{0,5}", pattern_message="must be a positive integer", default="50"
        ),
    }
)
