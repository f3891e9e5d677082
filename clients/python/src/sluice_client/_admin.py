"""Admin: the decider's AdminService (buckets, engines, configuration, versions)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final, TypeVar

import grpc
import grpc.aio
from google.protobuf import json_format, struct_pb2

from sluice.v1 import admin_pb2, admin_pb2_grpc, decider_pb2

from ._decider import ChannelOptions
from ._errors import error_from_rpc

_Resp = TypeVar("_Resp")

_ROLES: Final[dict[str, int]] = {
    "plain": decider_pb2.ROLE_PLAIN,
    "prefill": decider_pb2.ROLE_PREFILL,
    "decode": decider_pb2.ROLE_DECODE,
}

EngineSpecLike = admin_pb2.EngineSpec | Mapping[str, Any]


def _plain(v: Any) -> Any:
    """A Struct value as JSON-like Python, whole numbers as int (Struct numbers are doubles)."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _to_dict(s: struct_pb2.Struct) -> dict[str, Any]:
    return _plain(json_format.MessageToDict(s))  # type: ignore[no-any-return]


def _to_struct(d: Mapping[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(dict(d))
    return s


def _engine_spec(e: EngineSpecLike) -> admin_pb2.EngineSpec:
    if isinstance(e, admin_pb2.EngineSpec):
        return e
    d = dict(e)
    role = d.get("role")
    if isinstance(role, str) and role.lower() in _ROLES:
        d["role"] = _ROLES[role.lower()]
    spec = admin_pb2.EngineSpec()
    json_format.ParseDict(d, spec)
    return spec


def _document(document: str | Mapping[str, Any]) -> str:
    return document if isinstance(document, str) else json.dumps(document)


class Admin:
    """A client of a decider's AdminService over native gRPC.

    Reads need a viewer or admin token, writes an admin token. Every write takes
    ``based_on_version`` (0: the version the replica serves now); a stale one raises
    :class:`VersionConflictError` whose ``current_version`` is the version to re-read. An
    invalid result raises :class:`ConfigInvalidError` listing every problem in
    ``field_violations``. Buckets are plain dicts in the configuration document's shape.
    """

    def __init__(
        self,
        target: str = "",
        *,
        token: str | None = None,
        timeout: float | None = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        channel: grpc.Channel | None = None,
    ) -> None:
        if channel is None:
            if not target:
                raise ValueError("Admin: target (host:port of the decider's gRPC port) or channel= is required")
            channel = (
                grpc.secure_channel(target, credentials, options)
                if credentials is not None
                else grpc.insecure_channel(target, options)
            )
            self._owned: grpc.Channel | None = channel
        else:
            self._owned = None
        self._stub = admin_pb2_grpc.AdminServiceStub(channel)
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self._timeout = timeout

    def close(self) -> None:
        """Closes the channel the Admin opened (not one passed as channel=)."""
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, method: grpc.UnaryUnaryMultiCallable[Any, _Resp], req: Any) -> _Resp:
        try:
            return method(req, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err

    # --- configuration and versions ---------------------------------------------------

    def get_config(self) -> admin_pb2.GetConfigResponse:
        """The snapshot this replica serves: version, document_json, loaded_at, source."""
        return self._call(self._stub.GetConfig, admin_pb2.GetConfigRequest())

    def apply_config(
        self, document: str | Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ApplyConfigResponse:
        """Replaces the whole configuration (YAML or JSON text, or a dict) atomically."""
        return self._call(
            self._stub.ApplyConfig,
            admin_pb2.ApplyConfigRequest(document=_document(document), based_on_version=based_on_version),
        )

    def validate_config(
        self, document: str | Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ApplyConfigResponse:
        """Checks a document as apply_config would, storing nothing (``applied`` is False)."""
        return self._call(
            self._stub.ApplyConfig,
            admin_pb2.ApplyConfigRequest(
                document=_document(document), based_on_version=based_on_version, validate_only=True
            ),
        )

    def list_versions(self, limit: int = 0) -> admin_pb2.ListVersionsResponse:
        """The version log, newest first (``versions``), and ``current_version``."""
        return self._call(self._stub.ListVersions, admin_pb2.ListVersionsRequest(limit=limit))

    def get_version(self, version: int) -> admin_pb2.GetVersionResponse:
        """One logged version (``info``) with its document (``document_json``)."""
        return self._call(self._stub.GetVersion, admin_pb2.GetVersionRequest(version=version))

    def rollback(self, version: int, *, based_on_version: int = 0) -> admin_pb2.RollbackResponse:
        """Stores an earlier version's document as a new version."""
        return self._call(
            self._stub.Rollback, admin_pb2.RollbackRequest(version=version, based_on_version=based_on_version)
        )

    # --- buckets ----------------------------------------------------------------------

    def list_buckets(self) -> list[dict[str, Any]]:
        """The buckets in force, in document order."""
        return [_to_dict(b) for b in self._call(self._stub.ListBuckets, admin_pb2.ListBucketsRequest()).buckets]

    def get_bucket(self, bucket_id: str) -> dict[str, Any]:
        """One bucket; NotFoundError (BUCKET_NOT_FOUND) when there is none."""
        return _to_dict(self._call(self._stub.GetBucket, admin_pb2.GetBucketRequest(id=bucket_id)).bucket)

    def create_bucket(
        self, bucket: Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.CreateBucketResponse:
        """Appends a bucket (its id included); AlreadyExistsError when the id is taken."""
        return self._call(
            self._stub.CreateBucket,
            admin_pb2.CreateBucketRequest(bucket=_to_struct(bucket), based_on_version=based_on_version),
        )

    def replace_bucket(
        self, bucket_id: str, bucket: Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ReplaceBucketResponse:
        """Replaces the bucket with this id."""
        return self._call(
            self._stub.ReplaceBucket,
            admin_pb2.ReplaceBucketRequest(id=bucket_id, bucket=_to_struct(bucket), based_on_version=based_on_version),
        )

    def delete_bucket(self, bucket_id: str, *, based_on_version: int = 0) -> admin_pb2.DeleteBucketResponse:
        """Removes a bucket."""
        return self._call(
            self._stub.DeleteBucket, admin_pb2.DeleteBucketRequest(id=bucket_id, based_on_version=based_on_version)
        )

    # --- engines ----------------------------------------------------------------------

    def list_engines(self, model: str = "") -> list[admin_pb2.Engine]:
        """Registered engines (only model's when given) with health and load, by id."""
        return list(self._call(self._stub.ListEngines, admin_pb2.ListEnginesRequest(model=model)).engines)

    def get_engine(self, engine_id: str) -> admin_pb2.Engine:
        """One engine; NotFoundError (ENGINE_NOT_FOUND) when there is none."""
        return self._call(self._stub.GetEngine, admin_pb2.GetEngineRequest(id=engine_id)).engine

    def register_engine(
        self, engine: EngineSpecLike, *, based_on_version: int = 0
    ) -> admin_pb2.RegisterEngineResponse:
        """Adds an engine (a sluice.v1.EngineSpec, or a dict with role "plain"/"prefill"/"decode")."""
        return self._call(
            self._stub.RegisterEngine,
            admin_pb2.RegisterEngineRequest(engine=_engine_spec(engine), based_on_version=based_on_version),
        )

    def update_engine(
        self, engine_id: str, engine: EngineSpecLike, *, based_on_version: int = 0
    ) -> admin_pb2.UpdateEngineResponse:
        """Replaces a configured engine's spec."""
        return self._call(
            self._stub.UpdateEngine,
            admin_pb2.UpdateEngineRequest(
                id=engine_id, engine=_engine_spec(engine), based_on_version=based_on_version
            ),
        )

    def drain_engine(self, engine_id: str, *, based_on_version: int = 0) -> admin_pb2.DrainEngineResponse:
        """Takes an engine out of every engine group and labels it sluice.dev/drained=true."""
        return self._call(
            self._stub.DrainEngine, admin_pb2.DrainEngineRequest(id=engine_id, based_on_version=based_on_version)
        )

    def remove_engine(self, engine_id: str, *, based_on_version: int = 0) -> admin_pb2.RemoveEngineResponse:
        """Deletes an engine from the worker list and from every engine group."""
        return self._call(
            self._stub.RemoveEngine, admin_pb2.RemoveEngineRequest(id=engine_id, based_on_version=based_on_version)
        )


class AsyncAdmin:
    """Admin's asyncio twin (grpc.aio): the same arguments, awaitable methods.

    Create it inside the event loop that uses it, e.g. ``async with AsyncAdmin(...) as a``.
    """

    def __init__(
        self,
        target: str = "",
        *,
        token: str | None = None,
        timeout: float | None = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        if channel is None:
            if not target:
                raise ValueError("AsyncAdmin: target (host:port of the decider's gRPC port) or channel= is required")
            channel = (
                grpc.aio.secure_channel(target, credentials, options)
                if credentials is not None
                else grpc.aio.insecure_channel(target, options)
            )
            self._owned: grpc.aio.Channel | None = channel
        else:
            self._owned = None
        self._stub = admin_pb2_grpc.AdminServiceStub(channel)
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self._timeout = timeout

    async def close(self) -> None:
        """Closes the channel the AsyncAdmin opened (not one passed as channel=)."""
        if self._owned is not None:
            await self._owned.close(None)

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _call(self, method: grpc.aio.UnaryUnaryMultiCallable[Any, _Resp], req: Any) -> _Resp:
        try:
            resp: _Resp = await method(req, timeout=self._timeout, metadata=self._metadata)
            return resp
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err) from err

    # --- configuration and versions ---------------------------------------------------

    async def get_config(self) -> admin_pb2.GetConfigResponse:
        """The snapshot this replica serves: version, document_json, loaded_at, source."""
        return await self._call(self._stub.GetConfig, admin_pb2.GetConfigRequest())

    async def apply_config(
        self, document: str | Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ApplyConfigResponse:
        """Replaces the whole configuration (YAML or JSON text, or a dict) atomically."""
        return await self._call(
            self._stub.ApplyConfig,
            admin_pb2.ApplyConfigRequest(document=_document(document), based_on_version=based_on_version),
        )

    async def validate_config(
        self, document: str | Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ApplyConfigResponse:
        """Checks a document as apply_config would, storing nothing (``applied`` is False)."""
        return await self._call(
            self._stub.ApplyConfig,
            admin_pb2.ApplyConfigRequest(
                document=_document(document), based_on_version=based_on_version, validate_only=True
            ),
        )

    async def list_versions(self, limit: int = 0) -> admin_pb2.ListVersionsResponse:
        """The version log, newest first (``versions``), and ``current_version``."""
        return await self._call(self._stub.ListVersions, admin_pb2.ListVersionsRequest(limit=limit))

    async def get_version(self, version: int) -> admin_pb2.GetVersionResponse:
        """One logged version (``info``) with its document (``document_json``)."""
        return await self._call(self._stub.GetVersion, admin_pb2.GetVersionRequest(version=version))

    async def rollback(self, version: int, *, based_on_version: int = 0) -> admin_pb2.RollbackResponse:
        """Stores an earlier version's document as a new version."""
        return await self._call(
            self._stub.Rollback, admin_pb2.RollbackRequest(version=version, based_on_version=based_on_version)
        )

    # --- buckets ----------------------------------------------------------------------

    async def list_buckets(self) -> list[dict[str, Any]]:
        """The buckets in force, in document order."""
        resp = await self._call(self._stub.ListBuckets, admin_pb2.ListBucketsRequest())
        return [_to_dict(b) for b in resp.buckets]

    async def get_bucket(self, bucket_id: str) -> dict[str, Any]:
        """One bucket; NotFoundError (BUCKET_NOT_FOUND) when there is none."""
        return _to_dict((await self._call(self._stub.GetBucket, admin_pb2.GetBucketRequest(id=bucket_id))).bucket)

    async def create_bucket(
        self, bucket: Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.CreateBucketResponse:
        """Appends a bucket (its id included); AlreadyExistsError when the id is taken."""
        return await self._call(
            self._stub.CreateBucket,
            admin_pb2.CreateBucketRequest(bucket=_to_struct(bucket), based_on_version=based_on_version),
        )

    async def replace_bucket(
        self, bucket_id: str, bucket: Mapping[str, Any], *, based_on_version: int = 0
    ) -> admin_pb2.ReplaceBucketResponse:
        """Replaces the bucket with this id."""
        return await self._call(
            self._stub.ReplaceBucket,
            admin_pb2.ReplaceBucketRequest(id=bucket_id, bucket=_to_struct(bucket), based_on_version=based_on_version),
        )

    async def delete_bucket(self, bucket_id: str, *, based_on_version: int = 0) -> admin_pb2.DeleteBucketResponse:
        """Removes a bucket."""
        return await self._call(
            self._stub.DeleteBucket, admin_pb2.DeleteBucketRequest(id=bucket_id, based_on_version=based_on_version)
        )

    # --- engines ----------------------------------------------------------------------

    async def list_engines(self, model: str = "") -> list[admin_pb2.Engine]:
        """Registered engines (only model's when given) with health and load, by id."""
        return list((await self._call(self._stub.ListEngines, admin_pb2.ListEnginesRequest(model=model))).engines)

    async def get_engine(self, engine_id: str) -> admin_pb2.Engine:
        """One engine; NotFoundError (ENGINE_NOT_FOUND) when there is none."""
        return (await self._call(self._stub.GetEngine, admin_pb2.GetEngineRequest(id=engine_id))).engine

    async def register_engine(
        self, engine: EngineSpecLike, *, based_on_version: int = 0
    ) -> admin_pb2.RegisterEngineResponse:
        """Adds an engine (a sluice.v1.EngineSpec, or a dict with role "plain"/"prefill"/"decode")."""
        return await self._call(
            self._stub.RegisterEngine,
            admin_pb2.RegisterEngineRequest(engine=_engine_spec(engine), based_on_version=based_on_version),
        )

    async def update_engine(
        self, engine_id: str, engine: EngineSpecLike, *, based_on_version: int = 0
    ) -> admin_pb2.UpdateEngineResponse:
        """Replaces a configured engine's spec."""
        return await self._call(
            self._stub.UpdateEngine,
            admin_pb2.UpdateEngineRequest(
                id=engine_id, engine=_engine_spec(engine), based_on_version=based_on_version
            ),
        )

    async def drain_engine(self, engine_id: str, *, based_on_version: int = 0) -> admin_pb2.DrainEngineResponse:
        """Takes an engine out of every engine group and labels it sluice.dev/drained=true."""
        return await self._call(
            self._stub.DrainEngine, admin_pb2.DrainEngineRequest(id=engine_id, based_on_version=based_on_version)
        )

    async def remove_engine(self, engine_id: str, *, based_on_version: int = 0) -> admin_pb2.RemoveEngineResponse:
        """Deletes an engine from the worker list and from every engine group."""
        return await self._call(
            self._stub.RemoveEngine, admin_pb2.RemoveEngineRequest(id=engine_id, based_on_version=based_on_version)
        )
