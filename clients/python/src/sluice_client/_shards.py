"""ShardedDecider and AsyncShardedDecider: Decide and Release routed by model among
model-sharded deciders (docs/decisions.md, "Model-sharded deciders")."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc

from ._admin import Admin, AsyncAdmin
from ._decider import AsyncDecider, ChannelOptions, Decider, DecideResponse, Outcome
from ._errors import DeciderError, WrongShardError

_log = logging.getLogger("sluice_client")

_C = TypeVar("_C")  # Decider or AsyncDecider


def shard_routes(document_json: str) -> dict[str, tuple[str, ...]]:
    """The routes a configuration document's ``shards`` list gives: model -> its shard's deciders.

    Only shards that list ``deciders`` route their models; a model of a shard without listed
    deciders, or of no shard, is absent (it goes to the decider the client was given).
    """
    doc = json.loads(document_json)
    routes: dict[str, tuple[str, ...]] = {}
    for shard in (doc.get("shards") or []) if isinstance(doc, dict) else []:
        deciders = tuple(str(d) for d in shard.get("deciders") or [])
        if deciders:
            for model in shard.get("models") or []:
                routes[str(model)] = deciders
    return routes


def _model_of(model: str, fields: dict[str, Any]) -> str:
    req = fields.get("request")
    return model or (req.model if req is not None else "")


class _Routes(Generic[_C]):
    """Which decider serves each model, and which one granted each lease.

    Thread-safe. Routes come from the shards list (``apply``) or from a WRONG_SHARD answer
    naming deciders (``learn``); a model without a route goes to ``home``. A lease is released
    on the very replica that granted it: leases live in one replica's table.
    """

    def __init__(self, home: _C, dial: Callable[[str], _C]) -> None:
        self.home: _C = home
        self._dial: Callable[[str], _C] = dial
        self._lock = threading.Lock()
        self._clients: dict[str, _C] = {}  # decider address -> client
        self._routes: dict[str, tuple[str, ...]] = {}  # model -> deciders
        self._mapped: set[str] = set()  # models routed by the shards list
        self._turn = 0
        self.version = 0  # of the shards list in force; 0 before the first read
        self._leases: dict[str, _C] = {}
        self._expiry: collections.deque[tuple[float, str]] = collections.deque()

    def client_for(self, model: str) -> _C:
        """The client of model's shard (round robin over its deciders), or home."""
        with self._lock:
            addrs = self._routes.get(model)
            if not addrs:
                return self.home
            self._turn += 1
            addr = addrs[self._turn % len(addrs)]
            c = self._clients.get(addr)
            if c is None:
                c = self._clients[addr] = self._dial(addr)
            return c

    def route_of(self, model: str) -> tuple[str, ...]:
        with self._lock:
            return self._routes.get(model, ())

    def learn(self, model: str, deciders: tuple[str, ...]) -> None:
        with self._lock:
            self._routes[model] = deciders
            self._mapped.discard(model)

    def forget(self, model: str) -> None:
        with self._lock:
            self._routes.pop(model, None)
            self._mapped.discard(model)

    def apply(self, version: int, want: dict[str, tuple[str, ...]]) -> list[str] | None:
        """Makes the routes from the shards list equal to want; None when version is not newer."""
        with self._lock:
            if version <= self.version:
                return None
            changed = []
            for model, deciders in want.items():
                if self._routes.get(model) != deciders or model not in self._mapped:
                    self._routes[model] = deciders
                    self._mapped.add(model)
                    changed.append(model)
            for model in [m for m in self._mapped if m not in want]:
                del self._routes[model]
                self._mapped.discard(model)
                changed.append(model)
            self.version = version
            return sorted(changed)

    def hold(self, resp: DecideResponse, client: _C) -> None:
        """Remembers which replica granted resp's lease (home's need no entry)."""
        now = time.time()
        with self._lock:
            while self._expiry and self._expiry[0][0] < now:
                self._leases.pop(self._expiry.popleft()[1], None)
            if client is self.home or not resp.lease_id:
                return
            expires = resp.lease_expires_at.ToSeconds() if resp.HasField("lease_expires_at") else now + 3600
            self._leases[resp.lease_id] = client
            self._expiry.append((float(expires), resp.lease_id))

    def lease_client(self, lease_id: str) -> _C:
        with self._lock:
            return self._leases.get(lease_id, self.home)

    def drop_lease(self, lease_id: str) -> None:
        with self._lock:
            self._leases.pop(lease_id, None)

    def clients(self) -> list[_C]:
        with self._lock:
            cs = list(self._clients.values())
            self._clients.clear()
            return cs


class _Sharded:
    """What both twins share: their settings and the reading of the shards list."""

    def __init__(self, refresh_interval: float) -> None:
        if refresh_interval < 0:
            raise ValueError(f"refresh_interval={refresh_interval}: must not be negative (0 reads no shards list)")
        self._interval = refresh_interval
        self._next_read = 0.0  # time.monotonic() of the next read; 0 before the first
        self._reading = False
        self._failing = False
        self._state = threading.Lock()

    def _due(self) -> bool | None:
        """None: no read now; True: the first read (the caller waits for it); False: a later one."""
        if self._interval == 0:
            return None
        now = time.monotonic()
        with self._state:
            if self._reading or now < self._next_read:
                return None
            first = self._next_read == 0
            self._reading = True
            self._next_read = now + self._interval
            return first

    def _read_done(self, routes: _Routes[Any], version: int | None, document_json: str, err: Exception | None) -> None:
        with self._state:
            self._reading = False
            changed_outcome = self._failing != (err is not None)
            self._failing = err is not None
        if err is not None:
            if changed_outcome:
                _log.info("sluice_client: shard map not read (%s); models are routed by WRONG_SHARD answers until it is", err)
            return
        if changed_outcome:
            _log.info("sluice_client: shard map read again")
        try:
            want = shard_routes(document_json)
        except (ValueError, AttributeError, TypeError) as e:
            _log.warning("sluice_client: shard map: the configuration is not the JSON expected (%s); keeping the routes", e)
            return
        changed = routes.apply(version or 0, want)
        if changed:
            _log.info("sluice_client: shard map version %d routes these models anew: %s", version, ", ".join(changed))


def _redirect(routes: _Routes[_C], model: str, err: WrongShardError, tried: _C) -> _C | None:
    """The client to send a refused call to once more, or None to raise err."""
    if err.deciders:
        routes.learn(model, err.deciders)
        return routes.client_for(model)
    if tried is routes.home:
        return None
    routes.forget(model)  # a stale route: the owner lists no deciders, so it is home's to answer
    return routes.home


class ShardedDecider(_Sharded):
    """Decide and Release routed by model among model-sharded deciders, over native gRPC.

    ``target`` is any decider (host:port of its gRPC port); models that no shard with listed
    ``deciders`` owns go there. The shards list is read from it (AdminService.GetConfig, with
    ``map_token``, else ``token``: a viewer or admin token when the decider has any, "" for no
    token when it has none) at the first call and again every ``refresh_interval``
    seconds (in the background, after a call finds it due; 0: never), and each model of a shard
    that lists ``deciders`` is sent straight to them, round robin. A WRONG_SHARD answer naming
    deciders routes the model there too and the call is sent once more, so a model moved since
    the last read, or a map the token may not read, costs one extra round trip; a refusal that names none raises
    :class:`WrongShardError`. Release goes to the replica that granted the lease. The other
    arguments are :class:`Decider`'s and apply to every decider dialed. Safe for concurrent use
    from threads.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        map_token: str | None = None,
        timeout: float | None = 1.0,
        retry_unavailable: int = 1,
        retry_backoff: float = 0.02,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        refresh_interval: float = 30.0,
    ) -> None:
        super().__init__(refresh_interval)
        kw: dict[str, Any] = dict(
            token=token, timeout=timeout, retry_unavailable=retry_unavailable, retry_backoff=retry_backoff,
            credentials=credentials, options=options,
        )  # fmt: skip
        if not target:
            raise ValueError("ShardedDecider: target (host:port of any decider's gRPC port) is required")
        self._routes: _Routes[Decider] = _Routes(Decider(target, **kw), lambda addr: Decider(addr, **kw))
        self._admin = Admin(target, token=token if map_token is None else map_token, timeout=timeout, credentials=credentials, options=options)
        self._thread: threading.Thread | None = None

    def route_of(self, model: str) -> tuple[str, ...]:
        """The deciders model is sent to; () when it goes to ``target``."""
        return self._routes.route_of(model)

    @property
    def shard_map_version(self) -> int:
        """The configuration version of the shards list in force; 0 before one was read."""
        return self._routes.version

    def refresh_shard_map(self) -> int:
        """Reads the shards list now; returns the version in force. Raises DeciderError."""
        resp = self._admin.get_config()
        self._read_done(self._routes, resp.version, resp.document_json, None)
        return self._routes.version

    def _read(self) -> None:
        try:
            resp = self._admin.get_config()
        except DeciderError as err:
            self._read_done(self._routes, None, "", err)
        else:
            self._read_done(self._routes, resp.version, resp.document_json, None)

    def _refresh(self) -> None:
        due = self._due()
        if due is True:
            self._read()
        elif due is False:
            self._thread = threading.Thread(target=self._read, name="sluice-shard-map", daemon=True)
            self._thread.start()

    def decide(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """:meth:`Decider.decide` on the model's deciders, following one WRONG_SHARD redirect."""
        self._refresh()
        m = _model_of(model, fields)
        c = self._routes.client_for(m)
        try:
            resp = c.decide(model, input_tokens, **fields)
        except WrongShardError as err:
            nxt = _redirect(self._routes, m, err, c)
            if nxt is None:
                raise
            c = nxt
            resp = c.decide(model, input_tokens, **fields)
        self._routes.hold(resp, c)
        return resp

    def dry_run(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """decide(..., dry_run=True)."""
        return self.decide(model, input_tokens, dry_run=True, **fields)

    def explain(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """decide(..., dry_run=True, explain=True)."""
        return self.decide(model, input_tokens, dry_run=True, explain=True, **fields)

    def release(
        self, lease_id: str, outcome: Outcome = "success", failed_engine_ids: Iterable[str] = (), *, timeout: float | None = None
    ) -> bool:
        """:meth:`Decider.release` on the replica that granted the lease."""
        released = self._routes.lease_client(lease_id).release(lease_id, outcome, failed_engine_ids, timeout=timeout)
        self._routes.drop_lease(lease_id)
        return released

    def close(self) -> None:
        """Closes every channel it opened, after a shards-list read in progress."""
        if self._thread is not None:
            self._thread.join(timeout=self._admin._timeout)
        for c in self._routes.clients():
            c.close()
        self._routes.home.close()
        self._admin.close()

    def __enter__(self) -> ShardedDecider:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncShardedDecider(_Sharded):
    """ShardedDecider's asyncio twin (grpc.aio): the same arguments, awaitable methods.

    The first call awaits the first read of the shards list; later reads run as tasks of the
    event loop. Create it inside the loop that uses it.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        map_token: str | None = None,
        timeout: float | None = 1.0,
        retry_unavailable: int = 1,
        retry_backoff: float = 0.02,
        credentials: grpc.ChannelCredentials | None = None,
        options: ChannelOptions = (),
        refresh_interval: float = 30.0,
    ) -> None:
        super().__init__(refresh_interval)
        kw: dict[str, Any] = dict(
            token=token, timeout=timeout, retry_unavailable=retry_unavailable, retry_backoff=retry_backoff,
            credentials=credentials, options=options,
        )  # fmt: skip
        if not target:
            raise ValueError("AsyncShardedDecider: target (host:port of any decider's gRPC port) is required")
        self._routes: _Routes[AsyncDecider] = _Routes(AsyncDecider(target, **kw), lambda addr: AsyncDecider(addr, **kw))
        self._admin = AsyncAdmin(target, token=token if map_token is None else map_token, timeout=timeout, credentials=credentials, options=options)
        self._task: asyncio.Task[None] | None = None

    def route_of(self, model: str) -> tuple[str, ...]:
        """See :meth:`ShardedDecider.route_of`."""
        return self._routes.route_of(model)

    @property
    def shard_map_version(self) -> int:
        """See :attr:`ShardedDecider.shard_map_version`."""
        return self._routes.version

    async def refresh_shard_map(self) -> int:
        """See :meth:`ShardedDecider.refresh_shard_map`."""
        resp = await self._admin.get_config()
        self._read_done(self._routes, resp.version, resp.document_json, None)
        return self._routes.version

    async def _read(self) -> None:
        try:
            resp = await self._admin.get_config()
        except DeciderError as err:
            self._read_done(self._routes, None, "", err)
        else:
            self._read_done(self._routes, resp.version, resp.document_json, None)

    async def _refresh(self) -> None:
        due = self._due()
        if due is True:
            await self._read()
        elif due is False:
            self._task = asyncio.get_running_loop().create_task(self._read())

    async def decide(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """See :meth:`ShardedDecider.decide`."""
        await self._refresh()
        m = _model_of(model, fields)
        c = self._routes.client_for(m)
        try:
            resp = await c.decide(model, input_tokens, **fields)
        except WrongShardError as err:
            nxt = _redirect(self._routes, m, err, c)
            if nxt is None:
                raise
            c = nxt
            resp = await c.decide(model, input_tokens, **fields)
        self._routes.hold(resp, c)
        return resp

    async def dry_run(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """See :meth:`ShardedDecider.dry_run`."""
        return await self.decide(model, input_tokens, dry_run=True, **fields)

    async def explain(self, model: str = "", input_tokens: int = 0, **fields: Any) -> DecideResponse:
        """See :meth:`ShardedDecider.explain`."""
        return await self.decide(model, input_tokens, dry_run=True, explain=True, **fields)

    async def release(
        self, lease_id: str, outcome: Outcome = "success", failed_engine_ids: Iterable[str] = (), *, timeout: float | None = None
    ) -> bool:
        """See :meth:`ShardedDecider.release`."""
        released = await self._routes.lease_client(lease_id).release(lease_id, outcome, failed_engine_ids, timeout=timeout)
        self._routes.drop_lease(lease_id)
        return released

    async def close(self) -> None:
        """See :meth:`ShardedDecider.close`."""
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self._admin._timeout)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        for c in self._routes.clients():
            await c.close()
        await self._routes.home.close()
        await self._admin.close()

    async def __aenter__(self) -> AsyncShardedDecider:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
