"""Fixtures for the client tests: a running decider, named by the environment.

tests/clients (go test, through scripts/test.sh) starts a decider on Postgres, seeds its
configuration and runs this suite with SLUICE_CLIENTS_* set; see tests/clients/clients_test.go
for the seeded buckets and engines.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sluice_client import Admin, Decider


def _env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise pytest.UsageError(
            f"{name} is not set: these tests need a running decider; run them through "
            "`scripts/test.sh -run TestClients ./tests/clients`, which starts one"
        )
    return v


class Env:
    def __init__(self) -> None:
        self.grpc = _env("SLUICE_CLIENTS_GRPC")
        self.closed = _env("SLUICE_CLIENTS_CLOSED")
        self.decide_token = _env("SLUICE_CLIENTS_DECIDE_TOKEN")
        self.admin_token = _env("SLUICE_CLIENTS_ADMIN_TOKEN")
        self.viewer_token = _env("SLUICE_CLIENTS_VIEWER_TOKEN")
        self.max_token_ids = int(_env("SLUICE_CLIENTS_MAX_TOKEN_IDS"))
        # The model-sharded deciders (tests/clients shardSeed): an unsharded one and shard a's
        # two, listed in this order under shard a's deciders.
        self.shard_home = _env("SLUICE_CLIENTS_SHARD_HOME")
        self.shard_home_http = _env("SLUICE_CLIENTS_SHARD_HOME_HTTP")
        self.shard_a = _env("SLUICE_CLIENTS_SHARD_A")
        self.shard_a_http = _env("SLUICE_CLIENTS_SHARD_A_HTTP")
        self.shard_a2 = _env("SLUICE_CLIENTS_SHARD_A2")
        self.shard_a2_http = _env("SLUICE_CLIENTS_SHARD_A2_HTTP")
        self.shard_a_deciders = (self.shard_a, self.shard_a2)


@pytest.fixture(scope="session")
def env() -> Env:
    return Env()


@pytest.fixture
def decider(env: Env) -> Iterator[Decider]:
    with Decider(env.grpc, token=env.decide_token, timeout=5.0) as d:
        yield d


@pytest.fixture
def admin(env: Env) -> Iterator[Admin]:
    with Admin(env.grpc, token=env.admin_token) as a:
        yield a


@pytest.fixture
def viewer(env: Env) -> Iterator[Admin]:
    with Admin(env.grpc, token=env.viewer_token) as a:
        yield a


@pytest.fixture(scope="session")
def shed_env() -> tuple[str, str]:
    """The shedding decider's gRPC and HTTP host:port (-max-concurrent-decides 1)."""
    return _env("SLUICE_CLIENTS_SHED_GRPC"), _env("SLUICE_CLIENTS_SHED_HTTP")
