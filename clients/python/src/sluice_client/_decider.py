"""Decider and AsyncDecider: Decide and Release over native gRPC."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Union

import grpc
import grpc.aio

from sluice.v1 import decider_pb2, decider_pb2_grpc

from ._errors import error_from_rpc

DecideRequest = decider_pb2.DecideRequest
DecideResponse = decider_pb2.DecideResponse

#: How a request ended, for Release: a name or a sluice.v1.ReleaseOutcome value.
Outcome = Union[Literal["success", "engine_failure", "cancelled", "unspecified"], int]

_OUTCOMES: Final[dict[str, int]] = {
    "unspecified": decider_pb2.RELEASE_OUTCOME_UNSPECIFIED,
    "success": decider_pb2.RELEASE_OUTCOME_SUCCESS,
    "engine_failure": decider_pb2.RELEASE_OUTCOME_ENGINE_FAILURE,
    "cancelled": decider_pb2.RELEASE_OUTCOME_CANCELLED,
}

ChannelOptions = Sequence[tuple[str, Any]]


def _outcome(outcome: Outcome) -> Any:
    if isinstance(outcome, str):
        try:
            return _OUTCOMES[outcome]
        except KeyError:
            raise ValueError(
                f"release outcome {outcome!r}: want one of {', '.join(sorted(_OUTCOMES))} "
                "or a sluice.v1.ReleaseOutcome value"
            ) from None
    return outcome


def _request(
    request: DecideRequest | None,
    model: str,
    input_tokens: int,
    expected_peak_tokens: int | None,
    token_ids: Iterable[int] | None,
    session_key: str,
    routing_key: str,
    request_id: str,
    exclude_engine_ids: Iterable[str] | None,
    lora_name: str,
    cache_salt: str,
    dry_run: bool,
    explain: bool,
    ttft_slo_ms: float | None,
) -> DecideRequest:
    if request is not None:
        if model or input_tokens:
            raise TypeError("decide: pass either request= or the request fields (model=, input_tokens=...), not both")
        if dry_run or explain:
            r = DecideRequest()
            r.CopyFrom(request)
            r.dry_run = r.dry_run or dry_run
            r.explain = r.explain or explain
            return r
        return request
    r = DecideRequest(
        model=model,
        input_tokens=input_tokens,
        token_ids=token_ids,
        session_key=session_key,
        routing_key=routing_key,
        request_id=request_id,
        exclude_engine_ids=exclude_engine_ids,
        lora_name=lora_name,
        cache_salt=cache_salt,
        dry_run=dry_run,
        explain=explain,
    )
    if expected_peak_tokens is not None:
        r.expected_peak_tokens = expected_peak_tokens
    if ttft_slo_ms is not None:
        r.ttft_slo_ms = ttft_slo_ms
    return r


class _Base:
    def __init__(
        self,
        token: str | None,
        timeout: float | None,
        retry_unavailable: int,
        retry_backoff: float,
    ) -> None:
        if retry_backoff < 0:
            raise ValueError(f"retry_backoff={retry_backoff}: must not be negative")
        self._metadata: tuple[tuple[str, str], ...] | None = (
            (("authorization", "Bearer " + token),) if token else None
        )
        self._timeout = timeout
        self._attempts = max(1, retry_unavailable)
        self._backoff = retry_backoff
        self._max_backoff = 10 * retry_backoff

    def _timeout_of(self, timeout: float | None) -> float | None:
        return self._timeout if timeout is None else timeout

    def _sleep_for(self, backoff: float) -> float:
        return backoff / 2 + random.uniform(0, backoff / 2)


class Decider(_Base):
    """A client of a decider's DeciderService over native gRPC (its -grpc-addr port).

    ``target`` is host:port or any gRPC target. ``token`` is sent as
    "authorization: Bearer <token>"; ``timeout`` bounds each attempt in seconds (None: no
    bound). ``retry_unavailable`` is the number of Decide attempts in total on UNAVAILABLE
    (every bucket exhausted, or the decider unreachable): a Decide that failed so opened no
    lease, so retrying is safe. Sleeps start at ``retry_backoff`` seconds, doubled per attempt
    with jitter, capped at ten times it. Failed calls raise :class:`DeciderError` subclasses.

    Without ``credentials`` the channel is plaintext; ``channel`` uses a channel the caller
    owns (close() leaves it open). Safe for concurrent use from threads.
    """

    def __init__(
        self,
        target: str = "",
        *,
        token: str | None = None,
        timeout: float | None = 1.0,
        retry_unavailable: int = 1,
        retry_backoff: float = 0.02,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        channel: grpc.Channel | None = None,
    ) -> None:
        super().__init__(token, timeout, retry_unavailable, retry_backoff)
        if channel is None:
            if not target:
                raise ValueError("Decider: target (host:port of the decider's gRPC port) or channel= is required")
            channel = (
                grpc.secure_channel(target, credentials, options)
                if credentials is not None
                else grpc.insecure_channel(target, options)
            )
            self._owned: grpc.Channel | None = channel
        else:
            self._owned = None
        self._stub = decider_pb2_grpc.DeciderServiceStub(channel)

    def close(self) -> None:
        """Closes the channel the Decider opened (not one passed as channel=)."""
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> Decider:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def decide(
        self,
        model: str = "",
        input_tokens: int = 0,
        *,
        expected_peak_tokens: int | None = None,
        token_ids: Iterable[int] | None = None,
        session_key: str = "",
        routing_key: str = "",
        request_id: str = "",
        exclude_engine_ids: Iterable[str] | None = None,
        lora_name: str = "",
        cache_salt: str = "",
        dry_run: bool = False,
        explain: bool = False,
        ttft_slo_ms: float | None = None,
        request: DecideRequest | None = None,
        timeout: float | None = None,
    ) -> DecideResponse:
        """Picks the engine(s) for one request and, unless dry_run, opens a lease.

        The fields are DecideRequest's (proto/sluice/v1/decider.proto); ``request=`` passes a
        whole sluice.v1.DecideRequest instead (for fields this signature does not name).
        ``ttft_slo_ms`` is the request's time-to-first-token target in milliseconds (None: no
        target); it orders the buckets only when the configuration enables ttft_slo, which then
        refuses a target that is not positive, finite and at most ttft_slo.max_target_ms
        (:class:`InvalidArgumentError`, reason INVALID_TTFT_SLO); otherwise it is ignored, and
        ``explain`` reports status "disabled".
        Returns the sluice.v1.DecideResponse: ``pick.plain`` or ``pick.pd`` (test with
        ``resp.pick.WhichOneof("kind")``), ``lease_id`` for :meth:`release`.
        """
        req = _request(
            request, model, input_tokens, expected_peak_tokens, token_ids, session_key, routing_key,
            request_id, exclude_engine_ids, lora_name, cache_salt, dry_run, explain, ttft_slo_ms,
        )  # fmt: skip
        t = self._timeout_of(timeout)
        backoff = self._backoff
        attempt = 1
        while True:
            try:
                return self._stub.Decide(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as err:
                if attempt >= self._attempts or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise error_from_rpc(err) from err
            time.sleep(self._sleep_for(backoff))
            backoff = min(2 * backoff, self._max_backoff)
            attempt += 1

    def dry_run(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """decide(..., dry_run=True): the decision the decider would make; no lease, no state."""
        return self.decide(model, input_tokens, dry_run=True, **fields)

    def explain(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """A dry run with explain: ``resp.explain`` lists every bucket, stage and candidate.

        On failure the raised error's ``explain`` holds the same account.
        """
        return self.decide(model, input_tokens, dry_run=True, explain=True, **fields)

    def release(
        self,
        lease_id: str,
        outcome: Outcome = "success",
        failed_engine_ids: Iterable[str] = (),
        *,
        timeout: float | None = None,
    ) -> bool:
        """Closes a lease; False when it was unknown, already released or expired."""
        req = decider_pb2.ReleaseRequest(lease_id=lease_id, outcome=_outcome(outcome), failed_engine_ids=failed_engine_ids)
        try:
            resp = self._stub.Release(req, timeout=self._timeout_of(timeout), metadata=self._metadata)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return resp.released


class AsyncDecider(_Base):
    """Decider's asyncio twin (grpc.aio): the same arguments, awaitable methods.

    Create it inside the event loop that uses it, e.g. ``async with AsyncDecider(...) as d``.
    """

    def __init__(
        self,
        target: str = "",
        *,
        token: str | None = None,
        timeout: float | None = 1.0,
        retry_unavailable: int = 1,
        retry_backoff: float = 0.02,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        super().__init__(token, timeout, retry_unavailable, retry_backoff)
        if channel is None:
            if not target:
                raise ValueError("AsyncDecider: target (host:port of the decider's gRPC port) or channel= is required")
            channel = (
                grpc.aio.secure_channel(target, credentials, options)
                if credentials is not None
                else grpc.aio.insecure_channel(target, options)
            )
            self._owned: grpc.aio.Channel | None = channel
        else:
            self._owned = None
        self._stub = decider_pb2_grpc.DeciderServiceStub(channel)

    async def close(self) -> None:
        """Closes the channel the AsyncDecider opened (not one passed as channel=)."""
        if self._owned is not None:
            await self._owned.close(None)

    async def __aenter__(self) -> AsyncDecider:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def decide(
        self,
        model: str = "",
        input_tokens: int = 0,
        *,
        expected_peak_tokens: int | None = None,
        token_ids: Iterable[int] | None = None,
        session_key: str = "",
        routing_key: str = "",
        request_id: str = "",
        exclude_engine_ids: Iterable[str] | None = None,
        lora_name: str = "",
        cache_salt: str = "",
        dry_run: bool = False,
        explain: bool = False,
        ttft_slo_ms: float | None = None,
        request: DecideRequest | None = None,
        timeout: float | None = None,
    ) -> DecideResponse:
        """See :meth:`Decider.decide`."""
        req = _request(
            request, model, input_tokens, expected_peak_tokens, token_ids, session_key, routing_key,
            request_id, exclude_engine_ids, lora_name, cache_salt, dry_run, explain, ttft_slo_ms,
        )  # fmt: skip
        t = self._timeout_of(timeout)
        backoff = self._backoff
        attempt = 1
        while True:
            try:
                resp: DecideResponse = await self._stub.Decide(req, timeout=t, metadata=self._metadata)
                return resp
            except grpc.aio.AioRpcError as err:
                if attempt >= self._attempts or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise error_from_rpc(err) from err
            await asyncio.sleep(self._sleep_for(backoff))
            backoff = min(2 * backoff, self._max_backoff)
            attempt += 1

    async def dry_run(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """See :meth:`Decider.dry_run`."""
        return await self.decide(model, input_tokens, dry_run=True, **fields)

    async def explain(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """See :meth:`Decider.explain`."""
        return await self.decide(model, input_tokens, dry_run=True, explain=True, **fields)

    async def release(
        self,
        lease_id: str,
        outcome: Outcome = "success",
        failed_engine_ids: Iterable[str] = (),
        *,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Decider.release`."""
        req = decider_pb2.ReleaseRequest(lease_id=lease_id, outcome=_outcome(outcome), failed_engine_ids=failed_engine_ids)
        try:
            resp: decider_pb2.ReleaseResponse = await self._stub.Release(
                req, timeout=self._timeout_of(timeout), metadata=self._metadata
            )
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err) from err
        return resp.released
