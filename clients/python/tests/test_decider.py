"""Decider and AsyncDecider against a real decider: decisions, leases, every error family."""

from __future__ import annotations

import socket
import threading

import grpc
import pytest
from conftest import Env

from sluice_client import (
    AdmissionRejectedError,
    AsyncDecider,
    DeadlineExceededError,
    Decider,
    DeciderError,
    DecideRequest,
    InvalidArgumentError,
    Reason,
    Rejection,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)

TIGHT = "tight-py"  # one engine, max_inflight_requests 1: a second lease is refused


def test_plain_decision_opens_a_lease_that_release_closes(decider: Decider) -> None:
    resp = decider.decide(model="chat", input_tokens=100, expected_peak_tokens=300, request_id="py-1")
    assert resp.bucket_id == "chat"
    assert resp.config_version >= 1
    assert resp.pick.WhichOneof("kind") == "plain"
    assert resp.pick.plain.engine_id in {"chat-a", "chat-b"}
    assert resp.pick.plain.url == "http://127.0.0.1:9"
    assert resp.lease_id
    assert resp.HasField("lease_expires_at")
    assert decider.release(resp.lease_id) is True
    # Release is idempotent: the lease is gone now.
    assert decider.release(resp.lease_id) is False


def test_pd_decision_names_both_engines(decider: Decider) -> None:
    resp = decider.decide("pd", 50)
    assert resp.pick.WhichOneof("kind") == "pd"
    assert resp.pick.pd.prefill.engine_id == "prefill-1"
    assert resp.pick.pd.prefill.bootstrap_port == 8998
    assert resp.pick.pd.decode.engine_id == "decode-1"
    assert decider.release(resp.lease_id, "engine_failure", ["decode-1"]) is True


def test_dry_run_takes_no_lease(decider: Decider) -> None:
    resp = decider.dry_run("chat", 10)
    assert resp.lease_id == ""
    assert not resp.HasField("lease_expires_at")
    assert resp.pick.plain.engine_id in {"chat-a", "chat-b"}


def test_explain_lists_buckets_stages_and_candidates(decider: Decider) -> None:
    resp = decider.explain("chat", 10)
    assert resp.lease_id == ""
    [attempt] = resp.explain.attempts
    assert attempt.bucket_id == "chat"
    assert attempt.outcome == "picked"
    [stage] = attempt.stages
    assert stage.policy == "round_robin"
    assert stage.picked_engine_id in {"chat-a", "chat-b"}
    assert stage.picked_engine_id in {c.engine_id for c in stage.candidates}


def test_ttft_slo_ms_reaches_the_decider(decider: Decider) -> None:
    # The seeded configuration does not enable ttft_slo: the decider echoes the target in the
    # explanation and says it was ignored; without the keyword the request carries none.
    resp = decider.explain("chat", 10, ttft_slo_ms=250.5)
    assert resp.explain.HasField("ttft_slo")
    assert resp.explain.ttft_slo.target_ms == 250.5
    assert resp.explain.ttft_slo.status == "disabled"
    assert list(resp.explain.ttft_slo.buckets) == []
    assert not decider.explain("chat", 10).explain.HasField("ttft_slo")
    # Zero is a target (proto3 optional: set, not absent); disabled, it is ignored like any.
    assert decider.dry_run("chat", 10, explain=True, ttft_slo_ms=0).explain.ttft_slo.target_ms == 0
    held = decider.decide("chat", 10, ttft_slo_ms=100, explain=True)
    try:
        assert held.lease_id and held.explain.ttft_slo.target_ms == 100
    finally:
        decider.release(held.lease_id)


@pytest.mark.asyncio
async def test_async_ttft_slo_ms(env: Env) -> None:
    async with AsyncDecider(env.grpc, token=env.decide_token, timeout=5.0) as d:
        resp = await d.explain("chat", 10, ttft_slo_ms=75)
        assert resp.explain.ttft_slo.target_ms == 75 and resp.explain.ttft_slo.status == "disabled"
        resp = await d.dry_run("chat", 10, explain=True, ttft_slo_ms=float("nan"))
        assert resp.explain.HasField("ttft_slo")  # NaN is sent as is; disabled, the decider ignores it
        held = await d.decide("chat", 10, ttft_slo_ms=100)
        assert held.lease_id
        assert await d.release(held.lease_id) is True


def test_a_whole_request_message_is_accepted(decider: Decider) -> None:
    resp = decider.decide(request=DecideRequest(model="chat", input_tokens=8, dry_run=True))
    assert resp.bucket_id == "chat" and resp.lease_id == ""
    with pytest.raises(TypeError, match="either request= or the request fields"):
        decider.decide("chat", 8, request=DecideRequest(model="chat"))


def test_lease_round_trip_through_admission(decider: Decider) -> None:
    held = decider.decide(TIGHT, 10)
    try:
        with pytest.raises(AdmissionRejectedError) as exc:
            decider.decide(TIGHT, 10)
        err = exc.value
        assert isinstance(err, UnavailableError)
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert err.reason == Reason.ADMISSION_REJECTED
        assert err.domain == "sluice.dev"
        assert err.rejections == (Rejection("tight-py", "plain", "tight-py-1", "max_inflight_requests"),)
        assert "max_inflight_requests" in str(err)
    finally:
        assert decider.release(held.lease_id) is True
    again = decider.decide(TIGHT, 10)
    assert again.pick.plain.engine_id == "tight-py-1"
    assert decider.release(again.lease_id, "cancelled") is True


def test_explain_of_a_refused_decision_rides_on_the_error(decider: Decider) -> None:
    held = decider.decide(TIGHT, 10)
    try:
        with pytest.raises(AdmissionRejectedError) as exc:
            decider.explain(TIGHT, 10)
        ex = exc.value.explain
        assert ex is not None
        assert [a.outcome for a in ex.attempts] == ["admission_rejected"]
        [cand] = ex.attempts[0].stages[0].candidates
        assert cand.engine_id == "tight-py-1" and cand.rejection == "max_inflight_requests"
    finally:
        decider.release(held.lease_id)


def test_retry_on_unavailable_waits_for_the_lease_to_go(env: Env, decider: Decider) -> None:
    held = decider.decide(TIGHT, 10)
    releaser = threading.Timer(0.2, decider.release, args=(held.lease_id,))
    releaser.start()
    try:
        with Decider(env.grpc, token=env.decide_token, retry_unavailable=50, retry_backoff=0.02) as patient:
            resp = patient.decide(TIGHT, 10)
        assert resp.pick.plain.engine_id == "tight-py-1"
        assert decider.release(resp.lease_id) is True
    finally:
        releaser.join()


def test_no_retry_by_default(decider: Decider) -> None:
    held = decider.decide(TIGHT, 10)
    try:
        with pytest.raises(AdmissionRejectedError):
            decider.decide(TIGHT, 10)
    finally:
        decider.release(held.lease_id)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"model": "", "input_tokens": 1}, Reason.EMPTY_MODEL),
        ({"model": "no-such-model", "input_tokens": 1}, Reason.UNKNOWN_MODEL),
        ({"model": "chat", "input_tokens": -1}, Reason.INVALID_INPUT_TOKENS),
        ({"model": "chat", "input_tokens": 10, "expected_peak_tokens": 5}, Reason.PEAK_BELOW_INPUT),
        ({"model": "chat", "input_tokens": 3, "token_ids": [1, 2]}, Reason.TOKEN_IDS_MISMATCH),
        ({"model": "chat", "input_tokens": 5000}, Reason.NO_MATCHING_BUCKET),
    ],
)
def test_request_checks_raise_invalid_argument(decider: Decider, fields: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidArgumentError) as exc:
        decider.decide(**fields)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.reason == reason
    assert exc.value.message  # names the field and the fix


def test_too_many_token_ids(env: Env, decider: Decider) -> None:
    n = env.max_token_ids + 1
    with pytest.raises(InvalidArgumentError) as exc:
        decider.decide("chat", n, token_ids=[7] * n)
    assert exc.value.reason == Reason.TOO_MANY_TOKEN_IDS
    assert str(env.max_token_ids) in exc.value.message


def test_a_message_above_the_grpc_limit_is_resource_exhausted(decider: Decider) -> None:
    # About 1.1 MB of protobuf: above the decider's gRPC receive limit (1 MiB at least). grpc-go
    # refuses it before sluice sees it, so the status carries no ErrorInfo.
    n = 220_000
    with pytest.raises(ResourceExhaustedError) as exc:
        decider.decide("chat", n, token_ids=[2**31] * n)
    assert exc.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_no_candidates_names_the_stage(decider: Decider) -> None:
    with pytest.raises(UnavailableError) as exc:
        decider.decide("chat", 10, exclude_engine_ids=["chat-a", "chat-b"])
    err = exc.value
    assert not isinstance(err, AdmissionRejectedError)
    assert err.reason == Reason.NO_CANDIDATES
    assert err.stage == "plain"
    assert err.rejections == ()


def test_release_checks(decider: Decider) -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        decider.release("")
    assert exc.value.reason == Reason.EMPTY_LEASE_ID
    with pytest.raises(InvalidArgumentError) as exc:
        decider.release("some-lease", 99)
    assert exc.value.reason == Reason.INVALID_OUTCOME
    with pytest.raises(ValueError, match="want one of"):
        decider.release("some-lease", "finished")  # type: ignore[arg-type]


@pytest.mark.parametrize(("token", "reason"), [(None, Reason.TOKEN_MISSING), ("wrong", Reason.TOKEN_INVALID)])
def test_auth(env: Env, token: str | None, reason: str) -> None:
    with Decider(env.grpc, token=token) as d:
        with pytest.raises(UnauthenticatedError) as exc:
            d.decide("chat", 1)
        assert exc.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert exc.value.reason == reason
        with pytest.raises(UnauthenticatedError):
            d.release("lease")


def test_unreachable_decider_is_unavailable_without_a_reason(env: Env) -> None:
    with Decider(env.closed, timeout=2.0, retry_unavailable=2, retry_backoff=0.01) as d:
        with pytest.raises(UnavailableError) as exc:
            d.decide("chat", 1)
    assert exc.value.reason == ""
    assert isinstance(exc.value.__cause__, grpc.RpcError)


def test_deadline() -> None:
    # A decider that hangs: its kernel completes the TCP handshake and it never answers, so the
    # call waits out its deadline. (A 1 µs deadline against the live decider was not certain to
    # expire: grpc's timers tick in milliseconds, and a quiet machine answered within one.)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        host, port = silent.getsockname()
        with Decider(f"{host}:{port}", timeout=0.2) as d:
            with pytest.raises(DeadlineExceededError) as exc:
                d.decide("chat", 1)
    assert exc.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_every_error_is_a_decider_error(decider: Decider) -> None:
    with pytest.raises(DeciderError):
        decider.decide("", 1)


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="target"):
        Decider()
    with pytest.raises(ValueError, match="retry_backoff"):
        Decider("127.0.0.1:1", retry_backoff=-1)


async def _async_round_trip(env: Env) -> None:
    async with AsyncDecider(env.grpc, token=env.decide_token, timeout=5.0) as d:
        held = await d.decide(TIGHT, 10)
        assert held.pick.plain.engine_id == "tight-py-1"
        try:
            with pytest.raises(AdmissionRejectedError) as exc:
                await d.decide(TIGHT, 10)
            assert exc.value.rejections[0].limit == "max_inflight_requests"
            dry = await d.dry_run("chat", 10)
            assert dry.lease_id == ""
            ex = await d.explain("pd", 10)
            assert ex.explain.attempts[0].bucket_id == "pd"
        finally:
            assert await d.release(held.lease_id) is True
        assert await d.release(held.lease_id) is False
        with pytest.raises(InvalidArgumentError) as bad:
            await d.decide("no-such-model", 1)
        assert bad.value.reason == Reason.UNKNOWN_MODEL
    async with AsyncDecider(env.grpc) as anonymous:
        with pytest.raises(UnauthenticatedError) as auth:
            await anonymous.decide("chat", 1)
        assert auth.value.reason == Reason.TOKEN_MISSING


@pytest.mark.asyncio
async def test_async_twin(env: Env) -> None:
    await _async_round_trip(env)


@pytest.mark.asyncio
async def test_async_retry_on_unavailable(env: Env, decider: Decider) -> None:
    held = decider.decide(TIGHT, 10)
    releaser = threading.Timer(0.2, decider.release, args=(held.lease_id,))
    releaser.start()
    try:
        async with AsyncDecider(env.grpc, token=env.decide_token, retry_unavailable=50, retry_backoff=0.02) as d:
            resp = await d.decide(TIGHT, 10)
            assert await d.release(resp.lease_id) is True
    finally:
        releaser.join()
