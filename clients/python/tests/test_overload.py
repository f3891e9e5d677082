"""OverloadedError from a decider that sheds: its one Decide slot is held by a REST call."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import grpc
import pytest
from conftest import Env

from sluice_client import DeciderError, Decider, OverloadedError, Reason, ResourceExhaustedError


@pytest.fixture
def held_slot(env: Env, shed_env: tuple[str, str]) -> Iterator[None]:
    """A REST Decide whose body never completes: it holds the shedding decider's one slot."""
    host, port = shed_env[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/decide HTTP/1.1\r\nHost: decider\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + env.decide_token.encode() + b"\r\nContent-Length: 100\r\n\r\n{"
        )
        yield


def shed_error(d: Decider) -> DeciderError:
    # The slot is taken once the decider has read the REST call's headers: poll until a Decide
    # is shed (a dry run: an admitted one changes nothing).
    deadline = time.monotonic() + 10
    while True:
        try:
            d.dry_run("chat", 1)
        except DeciderError as err:
            return err
        assert time.monotonic() < deadline, "no Decide was shed within 10 s while the slot was held"
        time.sleep(0.02)


def test_overloaded_carries_the_retry_hint(env: Env, shed_env: tuple[str, str], held_slot: None) -> None:
    with Decider(shed_env[0], token=env.decide_token, retry_unavailable=5) as d:
        err = shed_error(d)
    assert isinstance(err, OverloadedError) and isinstance(err, ResourceExhaustedError)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.reason == Reason.DECIDER_OVERLOADED
    assert err.retry_after == 1.0
    assert err.metadata == {"max_concurrent_decides": "1"}


def test_the_slot_comes_back(env: Env, shed_env: tuple[str, str]) -> None:
    # No call holds the slot now (the fixture above closed its connection): Decide answers.
    with Decider(shed_env[0], token=env.decide_token) as d:
        deadline = time.monotonic() + 10
        while True:
            try:
                resp = d.dry_run("chat", 1)
                break
            except OverloadedError:
                assert time.monotonic() < deadline, "the shed slot never came back"
                time.sleep(0.02)
    assert resp.bucket_id == "chat"
