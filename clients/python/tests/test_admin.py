"""Admin against a real decider on Postgres: buckets, engines, configuration, versions."""

from __future__ import annotations

import json

import grpc
import pytest

from sluice_client import (
    Admin,
    AsyncAdmin,
    AlreadyExistsError,
    ConfigInvalidError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Reason,
    UnauthenticatedError,
    VersionConflictError,
)
from sluice.v1 import admin_pb2
from sluice.v1.decider_pb2 import ROLE_PLAIN

EXTRA = {
    "id": "py-extra",
    "rank": 90,
    "models": ["chat"],
    "limits": {"min": 0, "max": 100000},
    "groups": {"plain": {"worker_ids": ["chat-a"], "policy": {"type": "round_robin"}}},
}


def test_viewer_reads_buckets_with_integers(viewer: Admin) -> None:
    buckets = {b["id"]: b for b in viewer.list_buckets()}
    assert {"chat", "tight-py", "tight-ts", "pd"} <= set(buckets)
    chat = viewer.get_bucket("chat")
    assert chat == buckets["chat"]
    assert chat["rank"] == 10 and isinstance(chat["rank"], int)
    assert chat["max_context_tokens"] == 8192


def test_viewer_may_not_write(viewer: Admin) -> None:
    with pytest.raises(PermissionDeniedError) as exc:
        viewer.delete_bucket("chat")
    assert exc.value.reason == Reason.ROLE_NOT_ALLOWED
    assert exc.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_admin_needs_a_token(env: object) -> None:
    from conftest import Env

    assert isinstance(env, Env)
    with Admin(env.grpc) as anonymous:
        with pytest.raises(UnauthenticatedError) as exc:
            anonymous.list_buckets()
    assert exc.value.reason == Reason.TOKEN_MISSING


def test_missing_things_are_not_found(admin: Admin) -> None:
    with pytest.raises(NotFoundError) as exc:
        admin.get_bucket("no-such-bucket")
    assert exc.value.reason == Reason.BUCKET_NOT_FOUND
    with pytest.raises(NotFoundError) as exc:
        admin.get_engine("no-such-engine")
    assert exc.value.reason == Reason.ENGINE_NOT_FOUND
    with pytest.raises(NotFoundError) as exc:
        admin.get_version(10**9)
    assert exc.value.reason == Reason.CONFIG_VERSION_NOT_FOUND


def test_bucket_lifecycle_with_versions(admin: Admin) -> None:
    created = admin.create_bucket(EXTRA)
    assert "py-extra" in created.summary
    try:
        assert admin.get_bucket("py-extra")["limits"] == {"max": 100000}
        with pytest.raises(AlreadyExistsError) as exists:
            admin.create_bucket(EXTRA)
        assert exists.value.reason == Reason.BUCKET_EXISTS

        # A write based on a stale version names the version to re-read.
        with pytest.raises(VersionConflictError) as conflict:
            admin.replace_bucket("py-extra", {**EXTRA, "rank": 91}, based_on_version=created.version - 1)
        err = conflict.value
        assert err.reason == Reason.CONFIG_VERSION_CONFLICT
        assert err.current_version == created.version
        replaced = admin.replace_bucket("py-extra", {**EXTRA, "rank": 91}, based_on_version=err.current_version)
        assert replaced.version == created.version + 1
        assert admin.get_bucket("py-extra")["rank"] == 91

        with pytest.raises(InvalidArgumentError) as mismatch:
            admin.replace_bucket("py-extra", {**EXTRA, "id": "other"})
        assert mismatch.value.reason == Reason.BUCKET_ID_MISMATCH
    finally:
        admin.delete_bucket("py-extra")
    with pytest.raises(NotFoundError):
        admin.get_bucket("py-extra")


def test_invalid_configuration_lists_every_problem(admin: Admin) -> None:
    cfg = admin.get_config()
    doc = json.loads(cfg.document_json)
    doc["buckets"][0]["groups"]["plain"]["policy"]["type"] = "no_such_policy"
    doc["buckets"][1]["rank"] = "high"
    with pytest.raises(ConfigInvalidError) as exc:
        admin.validate_config(doc)
    err = exc.value
    assert err.reason == Reason.CONFIG_INVALID
    fields = {v.field for v in err.field_violations}
    assert "buckets[0].groups.plain.policy.type" in fields
    assert any(f.startswith("buckets[1].rank") for f in fields), fields
    assert all(v.description for v in err.field_violations)
    # Nothing was stored.
    assert admin.get_config().version == cfg.version


def test_validate_apply_and_rollback(admin: Admin) -> None:
    before = admin.get_config()
    doc = json.loads(before.document_json)
    checked = admin.validate_config(doc)
    assert checked.applied is False and checked.version == before.version

    doc["buckets"].append({**EXTRA, "id": "py-rollback"})
    applied = admin.apply_config(doc, based_on_version=before.version)
    assert applied.applied is True and applied.version == before.version + 1
    assert "py-rollback" in applied.summary

    versions = admin.list_versions(limit=2)
    assert versions.current_version == applied.version
    assert [v.version for v in versions.versions] == [applied.version, before.version]
    got = admin.get_version(applied.version)
    assert got.info.version == applied.version and "py-rollback" in got.document_json

    back = admin.rollback(before.version)
    assert back.version == applied.version + 1
    assert admin.list_versions(limit=1).versions[0].rollback_of == before.version
    with pytest.raises(NotFoundError):
        admin.get_bucket("py-rollback")


def test_engine_lifecycle(admin: Admin, viewer: Admin) -> None:
    ids = [e.id for e in viewer.list_engines(model="chat")]
    assert ids == ["chat-a", "chat-b"]
    spec = {"id": "py-engine", "url": "http://127.0.0.1:9", "models": ["chat"], "role": "plain"}
    admin.register_engine(spec)
    try:
        with pytest.raises(AlreadyExistsError) as exists:
            admin.register_engine(spec)
        assert exists.value.reason == Reason.ENGINE_EXISTS
        eng = admin.get_engine("py-engine")
        assert eng.url == "http://127.0.0.1:9" and list(eng.models) == ["chat"]
        admin.update_engine(
            "py-engine",
            admin_pb2.EngineSpec(
                id="py-engine", url="http://127.0.0.1:10", models=["chat"], role=ROLE_PLAIN, labels={"zone": "a"}
            ),
        )
        eng = admin.get_engine("py-engine")
        assert eng.url == "http://127.0.0.1:10" and dict(eng.labels) == {"zone": "a"}
        admin.drain_engine("py-engine")
        assert admin.get_engine("py-engine").labels["sluice.dev/drained"] == "true"
    finally:
        admin.remove_engine("py-engine")
    with pytest.raises(NotFoundError):
        admin.get_engine("py-engine")


@pytest.mark.asyncio
async def test_async_admin(env: object) -> None:
    from conftest import Env

    assert isinstance(env, Env)
    async with AsyncAdmin(env.grpc, token=env.viewer_token) as viewer:
        assert "chat" in {b["id"] for b in await viewer.list_buckets()}
        assert (await viewer.get_bucket("chat"))["rank"] == 10
        assert [e.id for e in await viewer.list_engines(model="pd")] == ["decode-1", "prefill-1"]
        with pytest.raises(PermissionDeniedError):
            await viewer.delete_bucket("chat")
    async with AsyncAdmin(env.grpc, token=env.admin_token) as admin:
        with pytest.raises(NotFoundError) as missing:
            await admin.get_bucket("no-such-bucket")
        assert missing.value.reason == Reason.BUCKET_NOT_FOUND
        created = await admin.create_bucket({**EXTRA, "id": "py-async"})
        try:
            with pytest.raises(VersionConflictError) as conflict:
                await admin.delete_bucket("py-async", based_on_version=created.version - 1)
            assert conflict.value.current_version == created.version
            versions = await admin.list_versions(limit=1)
            assert versions.current_version == created.version
        finally:
            await admin.delete_bucket("py-async")
        with pytest.raises(ConfigInvalidError) as invalid:
            await admin.validate_config("buckets: 3")
        assert [v.field for v in invalid.value.field_violations] == ["buckets"]
