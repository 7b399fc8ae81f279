"""ApiVersions: what this broker implements, and the v0 fallback for too-new clients.

From v3 the answer also carries features (KIP-584).  The broker finalizes `transaction.version`
2, as a Kafka 4.1 cluster does: a 4.x client then uses transactions v2 (KIP-890: no
AddPartitionsToTxn or AddOffsetsToTxn, an epoch bump at each EndTxn), which the transaction
handlers implement.  The level never changes, so its epoch is constant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from broker.handlers.base import Api, Hub, Messages, RequestContext
from broker.protocol.codec import build, nested, nested_or_none
from broker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.handlers.kio_types import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
MIN_VERSION, MAX_VERSION = 0, 4
MESSAGES: Messages[ApiVersionsRequest, ApiVersionsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)

TRANSACTION_VERSION = "transaction.version"
# (name, levels supported, level finalized)
FEATURES = ((TRANSACTION_VERSION, (0, 2), 2),)
FEATURES_EPOCH = 0


def response(apis: Sequence[Api[Hub]], version: int, error: ErrorCode = ErrorCode.none) -> ApiVersionsResponse:
    cls = MESSAGES.response(version)
    entry = nested(cls, "ApiVersion")
    supported, finalized = nested_or_none(cls, "SupportedFeatureKey"), nested_or_none(cls, "FinalizedFeatureKey")
    return build(
        cls,
        error_code=error,
        api_keys=tuple(build(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version) for a in apis),
        throttle_time=0,
        supported_features=tuple(
            build(supported, name=name, min_version=low, max_version=high) for name, (low, high), _ in FEATURES
        )
        if supported
        else (),
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=tuple(
            build(finalized, name=name, max_version_level=level, min_version_level=level) for name, _, level in FEATURES
        )
        if finalized
        else (),
        zk_migration_ready=False,
    )


def unsupported_version_response(apis: Sequence[Api[Hub]]) -> ApiVersionsResponse:
    """A client asked for an ApiVersions version newer than ours: answer in v0 with
    UNSUPPORTED_VERSION and our list, so it retries with a version we speak."""
    return response(apis, 0, ErrorCode.unsupported_version)


def make_handler(
    apis: Sequence[Api[Hub]],
) -> Callable[[object, RequestContext, ApiVersionsRequest], ApiVersionsResponse]:
    """ApiVersions' handler, which needs nothing of the broker but the table `apis`."""

    def handle(broker: object, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
        return response(apis, ctx.api_version)

    return handle
