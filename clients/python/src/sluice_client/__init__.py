"""sluice_client: a typed Python client for sluice's decider.

    from sluice_client import Decider, UnavailableError

    with Decider("localhost:7070", token="router-token") as d:
        resp = d.decide(model="llama-3-8b", input_tokens=512)
        ...  # forward to resp.pick.plain.url
        d.release(resp.lease_id)

Decider / AsyncDecider call DeciderService (Decide, Release); ShardedDecider /
AsyncShardedDecider do the same routed by model among model-sharded deciders (the shards list
the decider serves, and WRONG_SHARD answers: WrongShardError); Admin / AsyncAdmin call
AdminService.
Failures raise DeciderError subclasses carrying the ErrorInfo ``reason``, ``metadata``,
``current_version``, admission ``rejections``, ``field_violations`` and ``retry_after``.
The generated messages and stubs are in ``sluice.v1`` (made by ``make generate``).
"""

from sluice.v1.decider_pb2 import DecideRequest, DecideResponse, Explain

from ._admin import Admin, AsyncAdmin
from ._decider import AsyncDecider, Decider, Outcome
from ._errors import (
    DOMAIN,
    AdmissionRejectedError,
    AlreadyExistsError,
    ConfigInvalidError,
    DeadlineExceededError,
    DeciderError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    Reason,
    Rejection,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    VersionConflictError,
    WrongShardError,
    role_name,
)
from ._shards import AsyncShardedDecider, ShardedDecider, shard_routes

__all__ = [
    "DOMAIN",
    "Admin",
    "AdmissionRejectedError",
    "AlreadyExistsError",
    "AsyncAdmin",
    "AsyncDecider",
    "AsyncShardedDecider",
    "ConfigInvalidError",
    "DeadlineExceededError",
    "DecideRequest",
    "DecideResponse",
    "Decider",
    "DeciderError",
    "Explain",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "Outcome",
    "OverloadedError",
    "PermissionDeniedError",
    "Reason",
    "Rejection",
    "ResourceExhaustedError",
    "ShardedDecider",
    "UnauthenticatedError",
    "UnavailableError",
    "VersionConflictError",
    "WrongShardError",
    "role_name",
    "shard_routes",
]
