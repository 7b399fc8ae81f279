"""Reading the observability backends' HTTP APIs in tests: Zipkin's spans of a trace, PromQL
answers from Prometheus.  Shared by the local stack's tests and the compose tier's."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["ORDERS_PLACED", "ORDERS_RATE", "OTP_TRACE", "get", "holds", "parent_of", "query", "spans_of"]

ORDERS_PLACED = 'sum(http_requests_total{job="orders",route="/orders",method="POST"})'
ORDERS_RATE = 'sum(rate(http_requests_total{job="orders",route="/orders",method="POST"}[5m]))'
# An OTP request's whole trace, fanned out: (service, span name, kind) of each span it holds.
OTP_TRACE = (
    ("otp", "post /otp", "SERVER"),
    ("otp", "send otp.requests", "PRODUCER"),
    ("sms-sender", "process otp.requests", "CONSUMER"),
    ("email-sender", "process otp.requests", "CONSUMER"),
    ("catcher", "post /sms", "SERVER"),
    ("catcher", "smtp receive", "SERVER"),
)


def get(url: str) -> tuple[int, Any]:
    """The status and the body: JSON read, anything else as text."""
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", "replace")


def query(prometheus: str, promql: str) -> float | None:
    """The first value of an instant query, None when it has no result yet."""
    status, body = get(f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert status == 200, body
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def spans_of(spans: list[dict[str, Any]], service: str, name: str, kind: str) -> list[dict[str, Any]]:
    """The spans of a Zipkin trace made by `service`, named `name`, of `kind`."""
    return [s for s in spans if (s["localEndpoint"]["serviceName"], s["name"], s.get("kind")) == (service, name, kind)]


def holds(spans: list[dict[str, Any]], *expected: tuple[str, str, str]) -> bool:
    """Whether a Zipkin trace has a span of each (service, name, kind) of `expected`."""
    return all(spans_of(spans, *each) for each in expected)


def parent_of(span: dict[str, Any], spans: list[dict[str, Any]]) -> dict[str, Any]:
    (parent,) = [s for s in spans if s["id"] == span.get("parentId")]
    return parent
