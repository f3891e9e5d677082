"""WRONG_SHARD and ShardedDecider against real model-sharded deciders.

tests/clients runs an unsharded decider ("home") and two deciders of shard a on one Postgres
store (shardSeed): a-py and move-py belong to shard a, which lists both; b-only to shard b,
which lists none; un-py to no shard. A lease lives on the replica that granted it, so a
Release sent to the other one would answer False.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import grpc
import pytest
from conftest import Env

from sluice_client import (
    Admin,
    AsyncShardedDecider,
    Decider,
    FailedPreconditionError,
    Reason,
    ShardedDecider,
    WrongShardError,
    shard_routes,
)


def wrong_shard_refusals(env: Env, owner: str) -> float:
    """sluice_decider_wrong_shard_total{owner} on the unsharded decider."""
    with urllib.request.urlopen(env.shard_home_http + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^sluice_decider_wrong_shard_total\{{owner="{re.escape(owner)}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_wrong_shard_error_names_the_owner_and_its_deciders(env: Env) -> None:
    with Decider(env.shard_home, token=env.decide_token, timeout=5.0) as home:
        with pytest.raises(WrongShardError) as e:
            home.dry_run("a-py", 10)
        err = e.value
        assert isinstance(err, FailedPreconditionError)
        assert err.code == grpc.StatusCode.FAILED_PRECONDITION
        assert err.reason == Reason.WRONG_SHARD
        assert (err.model, err.shard, err.replica_shard) == ("a-py", "a", "")
        assert err.deciders == env.shard_a_deciders
        assert env.shard_a in err.message and env.shard_a2 in err.message
        # Shard b lists no deciders: the error names the shard and no address.
        with pytest.raises(WrongShardError) as e:
            home.dry_run("b-only", 10)
        assert (e.value.shard, e.value.deciders) == ("b", ())
    with Decider(env.shard_a, token=env.decide_token, timeout=5.0) as a:
        with pytest.raises(WrongShardError) as e:
            a.dry_run("un-py", 10)
        assert (e.value.model, e.value.shard, e.value.replica_shard, e.value.deciders) == ("un-py", "", "a", ())


def test_shard_routes_reads_the_shards_list(env: Env) -> None:
    with Admin(env.shard_home, token=env.viewer_token) as viewer:
        routes = shard_routes(viewer.get_config().document_json)
    assert routes["a-py"] == env.shard_a_deciders
    assert "b-only" not in routes and "un-py" not in routes
    assert shard_routes("{}") == {} and shard_routes('{"shards": [{"id": "x", "models": ["m"]}]}') == {}


def test_sharded_decider_routes_by_the_shard_map(env: Env) -> None:
    before = wrong_shard_refusals(env, "a")
    with ShardedDecider(env.shard_home, token=env.decide_token, map_token=env.viewer_token, timeout=5.0) as d:
        leases = [d.decide("a-py", 10) for _ in range(3)]
        assert {r.pick.plain.engine_id for r in leases} == {"sh-1"}
        # Each lease lives on the shard a replica that granted it (round robin spread them over both;
        # an odd count, so a Release sent round robin would miss every one):
        # released there, not on the other one nor on home.
        assert [d.release(r.lease_id) for r in leases] == [True] * 3
        assert d.route_of("a-py") == env.shard_a_deciders
        assert d.shard_map_version >= 1
        resp = d.decide("un-py", 10)
        assert d.route_of("un-py") == ()
        assert d.release(resp.lease_id) is True
        with pytest.raises(WrongShardError) as e:
            d.dry_run("b-only", 10)
        assert e.value.shard == "b"
    # Routed up front: shard a's models never reached home.
    assert wrong_shard_refusals(env, "a") == before


def test_sharded_decider_follows_wrong_shard_when_it_cannot_read_the_map(env: Env) -> None:
    # The decide token may not read the admin API (the decider has viewer tokens): the map read
    # is refused, and the first WRONG_SHARD routes the model.
    before = wrong_shard_refusals(env, "a")
    with ShardedDecider(env.shard_home, token=env.decide_token, timeout=5.0) as d:
        leases = [d.decide("a-py", 10).lease_id for _ in range(3)]
        assert d.shard_map_version == 0
        assert d.route_of("a-py") == env.shard_a_deciders
        assert [d.release(lease) for lease in leases] == [True] * 3
    assert wrong_shard_refusals(env, "a") == before + 1


def test_a_moved_model_follows_the_map(env: Env) -> None:
    with ShardedDecider(
        env.shard_home, token=env.decide_token, map_token=env.viewer_token, timeout=5.0, refresh_interval=0.2
    ) as d, Admin(env.shard_home, token=env.admin_token) as admin:
        assert d.route_of("move-py") == () and d.dry_run("move-py", 10).bucket_id == "sharded"
        assert d.route_of("move-py") == env.shard_a_deciders
        cfg = admin.get_config()
        doc = json.loads(cfg.document_json)
        for shard in doc["shards"]:
            shard["models"] = [m for m in shard["models"] if m != "move-py"]
        applied = admin.apply_config(doc, based_on_version=cfg.version)
        deadline = time.monotonic() + 20
        while d.route_of("move-py") != () or d.shard_map_version < applied.version:
            assert time.monotonic() < deadline, f"move-py still routed to {d.route_of('move-py')} at map version {d.shard_map_version}"
            d.dry_run("un-py", 1)  # a call makes a due read start
            time.sleep(0.1)
        # Now the unsharded decider's: served there.
        resp = d.decide("move-py", 10)
        assert d.route_of("move-py") == ()
        assert d.release(resp.lease_id) is True


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="target"):
        ShardedDecider("")
    with pytest.raises(ValueError, match="refresh_interval"):
        ShardedDecider("localhost:1", refresh_interval=-1)


@pytest.mark.asyncio
async def test_async_twin(env: Env) -> None:
    before = wrong_shard_refusals(env, "a")
    async with AsyncShardedDecider(env.shard_home, token=env.decide_token, map_token=env.viewer_token, timeout=5.0) as d:
        leases = [await d.decide("a-py", 10) for _ in range(3)]
        assert d.route_of("a-py") == env.shard_a_deciders
        assert [await d.release(r.lease_id) for r in leases] == [True] * 3
        resp = await d.decide("un-py", 10)
        assert await d.release(resp.lease_id) is True
        with pytest.raises(WrongShardError):
            await d.dry_run("b-only", 10)
    assert wrong_shard_refusals(env, "a") == before
    # Without the map: the refusal is followed.
    async with AsyncShardedDecider(env.shard_home, token=env.decide_token, timeout=5.0, refresh_interval=0) as d:
        resp = await d.decide("a-py", 10)
        assert await d.release(resp.lease_id) is True
    assert wrong_shard_refusals(env, "a") == before + 1


def test_map_token_empty_reads_a_decider_without_admin_tokens(env: Env, shed_env: tuple[str, str]) -> None:
    # The shedding decider has a decide token and no admin or viewer token: its admin reads are
    # open to calls without a token, and refused to the decide token.
    shed_grpc, _ = shed_env
    with ShardedDecider(shed_grpc, token=env.decide_token, map_token="", timeout=5.0) as d:
        assert d.dry_run("chat", 10).bucket_id == "chat"
        assert d.shard_map_version >= 1
    with ShardedDecider(shed_grpc, token=env.decide_token, timeout=5.0) as d:
        assert d.dry_run("chat", 10).bucket_id == "chat"
        assert d.shard_map_version == 0
