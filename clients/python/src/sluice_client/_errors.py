"""Decider errors as exceptions: the gRPC status, its google.rpc details, plain objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

from sluice.v1 import decider_pb2, errors_pb2

#: The google.rpc.ErrorInfo domain of every error the decider returns.
DOMAIN: Final = "sluice.dev"


class Reason:
    """The ErrorInfo reasons the decider returns (docs/decisions.md "Errors", docs/rpc.md).

    Compare ``err.reason`` with these; a decider may add reasons, so keep a default branch.
    """

    # Decide request checks: INVALID_ARGUMENT.
    EMPTY_MODEL: Final = "EMPTY_MODEL"
    UNKNOWN_MODEL: Final = "UNKNOWN_MODEL"
    ADAPTER_CONFLICT: Final = "ADAPTER_CONFLICT"
    INVALID_INPUT_TOKENS: Final = "INVALID_INPUT_TOKENS"
    PEAK_BELOW_INPUT: Final = "PEAK_BELOW_INPUT"
    TOO_MANY_TOKEN_IDS: Final = "TOO_MANY_TOKEN_IDS"
    TOKEN_IDS_MISMATCH: Final = "TOKEN_IDS_MISMATCH"
    NO_MATCHING_BUCKET: Final = "NO_MATCHING_BUCKET"
    # No engine could take the request now: UNAVAILABLE, safe to retry.
    ADMISSION_REJECTED: Final = "ADMISSION_REJECTED"
    NO_CANDIDATES: Final = "NO_CANDIDATES"
    NO_PREFILL_CANDIDATES: Final = "NO_PREFILL_CANDIDATES"
    NO_DECODE_CANDIDATES: Final = "NO_DECODE_CANDIDATES"
    NO_HEALTHY_ENGINES: Final = "NO_HEALTHY_ENGINES"
    # Configuration or policy faults: INTERNAL.
    INVALID_CONFIGURATION: Final = "INVALID_CONFIGURATION"
    INVALID_SIGNAL: Final = "INVALID_SIGNAL"
    OUTSIDE_CANDIDATES: Final = "OUTSIDE_CANDIDATES"
    # The decider's own limits: RESOURCE_EXHAUSTED.
    DECIDER_OVERLOADED: Final = "DECIDER_OVERLOADED"
    REQUEST_TOO_LARGE: Final = "REQUEST_TOO_LARGE"
    # Authentication and permissions: UNAUTHENTICATED, PERMISSION_DENIED.
    TOKEN_MISSING: Final = "TOKEN_MISSING"
    TOKEN_INVALID: Final = "TOKEN_INVALID"
    ROLE_NOT_ALLOWED: Final = "ROLE_NOT_ALLOWED"
    ADMIN_WRITES_DISABLED: Final = "ADMIN_WRITES_DISABLED"
    # Release.
    EMPTY_LEASE_ID: Final = "EMPTY_LEASE_ID"
    INVALID_OUTCOME: Final = "INVALID_OUTCOME"
    # Admin API.
    CONFIG_INVALID: Final = "CONFIG_INVALID"
    CONFIG_VERSION_CONFLICT: Final = "CONFIG_VERSION_CONFLICT"
    CONFIG_VERSION_NOT_FOUND: Final = "CONFIG_VERSION_NOT_FOUND"
    CONFIG_READ_ONLY: Final = "CONFIG_READ_ONLY"
    CONFIG_STORE_UNAVAILABLE: Final = "CONFIG_STORE_UNAVAILABLE"
    BUCKET_NOT_FOUND: Final = "BUCKET_NOT_FOUND"
    BUCKET_EXISTS: Final = "BUCKET_EXISTS"
    BUCKET_MISSING: Final = "BUCKET_MISSING"
    BUCKET_ID_MISMATCH: Final = "BUCKET_ID_MISMATCH"
    ENGINE_NOT_FOUND: Final = "ENGINE_NOT_FOUND"
    ENGINE_EXISTS: Final = "ENGINE_EXISTS"
    ENGINE_MISSING: Final = "ENGINE_MISSING"
    ENGINE_ID_MISMATCH: Final = "ENGINE_ID_MISMATCH"
    # Model-sharded deciders: FAILED_PRECONDITION.
    WRONG_SHARD: Final = "WRONG_SHARD"


_ROLE_NAMES: Final[dict[int, str]] = {
    decider_pb2.ROLE_UNSPECIFIED: "unspecified",
    decider_pb2.ROLE_PLAIN: "plain",
    decider_pb2.ROLE_PREFILL: "prefill",
    decider_pb2.ROLE_DECODE: "decode",
}


def role_name(role: int) -> str:
    """The short name of a sluice.v1.Role value: "plain", "prefill", "decode"."""
    return _ROLE_NAMES.get(role) or f"role({role})"


@dataclasses.dataclass(frozen=True)
class Rejection:
    """One engine an admission cap turned away (sluice.v1.AdmissionRejection)."""

    bucket_id: str
    #: "plain", "prefill" or "decode": the stage that evaluated the engine.
    role: str
    engine_id: str
    #: The admission cap, for example "max_running_requests".
    limit: str


@dataclasses.dataclass(frozen=True)
class FieldViolation:
    """One problem of an invalid request or configuration (google.rpc.BadRequest)."""

    #: The field path, for example "buckets[0].limits.max".
    field: str
    description: str


class DeciderError(Exception):
    """A call the decider (or the transport to it) refused.

    ``code`` is the gRPC status code; ``reason`` the ErrorInfo reason (see :class:`Reason`),
    "" when the status carries none (a transport failure). The other attributes are the
    status's google.rpc details as plain objects; absent details are empty or None.
    """

    code: grpc.StatusCode
    message: str
    reason: str
    domain: str
    #: ErrorInfo metadata, for example {"stage": "decode"} or {"current_version": "7"}.
    metadata: Mapping[str, str]
    #: The admission rejections of an ADMISSION_REJECTED error, in evaluation order.
    rejections: tuple[Rejection, ...]
    #: The problems of an invalid configuration (CONFIG_INVALID).
    field_violations: tuple[FieldViolation, ...]
    #: The server's retry hint in seconds (google.rpc.RetryInfo), or None.
    retry_after: float | None
    #: With explain=True, how the failed decision was reached (sluice.v1.Explain).
    explain: decider_pb2.Explain | None

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        rejections: Iterable[Rejection] = (),
        field_violations: Iterable[FieldViolation] = (),
        retry_after: float | None = None,
        explain: decider_pb2.Explain | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata = dict(metadata or {})
        self.rejections = tuple(rejections)
        self.field_violations = tuple(field_violations)
        self.retry_after = retry_after
        self.explain = explain

    @property
    def current_version(self) -> int | None:
        """The version the decider serves, on CONFIG_VERSION_CONFLICT: re-read and retry."""
        v = self.metadata.get("current_version")
        return int(v) if v is not None and v.lstrip("-").isdigit() else None

    @property
    def stage(self) -> str | None:
        """The stage ("prefill", "decode", "plain") of a stage-specific unavailability."""
        return self.metadata.get("stage")

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        if self.reason:
            return f"{name} {self.reason}: {self.message}"
        return f"{name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, reason={self.reason!r}, message={self.message!r})"


class InvalidArgumentError(DeciderError):
    """The request cannot be served as sent (HTTP 400); retrying it does not help."""


class ConfigInvalidError(InvalidArgumentError):
    """A configuration write was refused: ``field_violations`` lists every problem."""


class NotFoundError(DeciderError):
    """A bucket, engine or version that does not exist (HTTP 404)."""


class AlreadyExistsError(DeciderError):
    """A bucket or engine id that is taken (HTTP 409)."""


class FailedPreconditionError(DeciderError):
    """A write based on a stale version, a read-only configuration, or a model of another shard."""


class VersionConflictError(FailedPreconditionError):
    """A write based on a stale version: ``current_version`` is the one to re-read."""


class WrongShardError(FailedPreconditionError):
    """This decider does not serve the model: another shard (or the unsharded deciders) does.

    Raised for reason WRONG_SHARD (docs/decisions.md, "Model-sharded deciders"). ``shard`` is the
    owning shard ("" when the model belongs to no shard: send it to an unsharded decider),
    ``deciders`` that shard's gRPC host:port as the configuration lists them (empty when it
    lists none), ``replica_shard`` the refusing decider's own shard ("" when unsharded).
    :class:`ShardedDecider` follows it by itself when ``deciders`` is not empty.
    """

    @property
    def model(self) -> str:
        """The refused model."""
        return self.metadata.get("model", "")

    @property
    def shard(self) -> str:
        """The shard that owns the model; "" for the unsharded deciders."""
        return self.metadata.get("shard", "")

    @property
    def replica_shard(self) -> str:
        """The shard the refusing decider serves; "" when it is unsharded."""
        return self.metadata.get("replica_shard", "")

    @property
    def deciders(self) -> tuple[str, ...]:
        """The owning shard's deciders (host:port of their gRPC ports), in configuration order."""
        return tuple(a.strip() for a in self.metadata.get("deciders", "").split(",") if a.strip())


class UnauthenticatedError(DeciderError):
    """No bearer token, or an unknown one (TOKEN_MISSING, TOKEN_INVALID; HTTP 401)."""


class PermissionDeniedError(DeciderError):
    """The token's role may not make this call (ROLE_NOT_ALLOWED, ADMIN_WRITES_DISABLED; 403)."""


class ResourceExhaustedError(DeciderError):
    """The decider's own limits: too many calls in progress, or a body too large."""


class OverloadedError(ResourceExhaustedError):
    """The replica shed the call (DECIDER_OVERLOADED); ``retry_after`` says when to retry."""


class UnavailableError(DeciderError):
    """No engine could take the request now, or the decider cannot be reached (HTTP 503).

    A Decide that failed so opened no lease: retrying it is safe.
    """


class AdmissionRejectedError(UnavailableError):
    """Every fitting bucket refused admission: ``rejections`` lists each cap hit where."""


class DeadlineExceededError(DeciderError):
    """The call took longer than its timeout."""


class InternalError(DeciderError):
    """A policy or configuration fault in the decider (HTTP 500)."""


_BY_CODE: Final[dict[grpc.StatusCode, type[DeciderError]]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalError,
}

_BY_REASON: Final[dict[tuple[grpc.StatusCode, str], type[DeciderError]]] = {
    (grpc.StatusCode.INVALID_ARGUMENT, Reason.CONFIG_INVALID): ConfigInvalidError,
    (grpc.StatusCode.FAILED_PRECONDITION, Reason.CONFIG_VERSION_CONFLICT): VersionConflictError,
    (grpc.StatusCode.FAILED_PRECONDITION, Reason.WRONG_SHARD): WrongShardError,
    (grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.DECIDER_OVERLOADED): OverloadedError,
    (grpc.StatusCode.UNAVAILABLE, Reason.ADMISSION_REJECTED): AdmissionRejectedError,
}

_STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
_ERROR_INFO: Final[str] = error_details_pb2.ErrorInfo.DESCRIPTOR.full_name
_RETRY_INFO: Final[str] = error_details_pb2.RetryInfo.DESCRIPTOR.full_name
_BAD_REQUEST: Final[str] = error_details_pb2.BadRequest.DESCRIPTOR.full_name
_REJECTIONS: Final[str] = errors_pb2.AdmissionRejections.DESCRIPTOR.full_name
_EXPLAIN: Final[str] = decider_pb2.Explain.DESCRIPTOR.full_name


def error_from_status(code: grpc.StatusCode, message: str, status_bin: bytes | None) -> DeciderError:
    """Builds the exception for a status with its google.rpc.Status details (wire bytes)."""
    kw: dict[str, Any] = {}
    if status_bin:
        st = status_pb2.Status.FromString(status_bin)
        message = st.message or message
        rejections: list[Rejection] = []
        violations: list[FieldViolation] = []
        for d in st.details:
            name = d.TypeName()
            if name == _ERROR_INFO:
                info = error_details_pb2.ErrorInfo.FromString(d.value)
                kw.setdefault("reason", info.reason)
                kw.setdefault("domain", info.domain)
                kw.setdefault("metadata", dict(info.metadata))
            elif name == _RETRY_INFO:
                retry = error_details_pb2.RetryInfo.FromString(d.value)
                kw["retry_after"] = retry.retry_delay.ToTimedelta().total_seconds()
            elif name == _BAD_REQUEST:
                bad = error_details_pb2.BadRequest.FromString(d.value)
                violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
            elif name == _REJECTIONS:
                rj = errors_pb2.AdmissionRejections.FromString(d.value)
                rejections.extend(
                    Rejection(r.bucket_id, role_name(r.role), r.engine_id, r.limit) for r in rj.rejections
                )
            elif name == _EXPLAIN:
                kw["explain"] = decider_pb2.Explain.FromString(d.value)
        kw["rejections"] = rejections
        kw["field_violations"] = violations
    reason = kw.get("reason", "")
    cls = _BY_REASON.get((code, reason)) or _BY_CODE.get(code, DeciderError)
    return cls(code, message, **kw)


def error_from_rpc(err: grpc.RpcError) -> DeciderError:
    """The DeciderError for a failed call (sync grpc.Call or grpc.aio.AioRpcError)."""
    call = cast(Any, err)  # grpc.Call and AioRpcError: code(), details(), trailing_metadata()
    code: grpc.StatusCode = call.code()
    message: str = call.details() or ""
    status_bin: bytes | None = None
    trailers: Iterable[tuple[str, str | bytes]] = call.trailing_metadata() or ()
    for key, value in trailers:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status_bin = value
            break
    e = error_from_status(code, message, status_bin)
    e.__cause__ = err
    return e
