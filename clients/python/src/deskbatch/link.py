"""The client's link to the daemon (src/client/link.ts in Python): the socket, hello -> welcome, heartbeats, and
reconnects with backoff that resume the session (``hello.resume_session_id``).

It knows nothing of batches: each turn of the connection's life (a socket adopted, dropped, a session lost,
giving up) and every message outside the hello exchange go to the client through the ``LinkHooks`` it is built
with, which send, fail or settle the batches.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Literal, cast

from ._websocket import Socket
from .errors import ConnectError, HandshakeRefusedError
from .protocol import (
    CLOSE_SESSION_RESUMED,
    AgentToolEntry,
    DesktopRequest,
    DesktopWait,
    ProfileRequest,
    TakeoverRequest,
    ToolEvent,
    Welcome,
)


@dataclass(frozen=True)
class ReconnectOptions:
    """How the client reconnects after a drop (seconds)."""

    #: Connection attempts after a drop before giving up (0: never reconnect).
    max_attempts: int = 10
    #: Delay before the first attempt; it doubles per attempt (with jitter) up to ``max_delay``.
    initial_delay: float = 0.25
    max_delay: float = 5.0


DEFAULT_RECONNECT = ReconnectOptions()

ClientState = Literal["connecting", "open", "reconnecting", "closed"]
GiveUpReason = Literal["connection_lost", "session_taken", "session_lost"]


@dataclass(frozen=True)
class Gone:
    """What a pinned target says when the daemon that holds the session is gone for good."""

    why: str


class LinkTarget:
    """Where the reconnects of a pinned session go (fleet.py): asked before every attempt.

    A session placed on a fleet's pod is pinned: every reconnect goes to that pod (its own DNS name, resolved
    again), and when the name is gone, its token no longer opens it (401), or it no longer has the session, the
    session is lost: its batches fail with SessionLostError, and no new session is started behind the caller.
    """

    async def next(self) -> str | Gone:
        """The URL of the next attempt, or why the daemon that holds the session is gone for good."""
        raise NotImplementedError


@dataclass
class ConnectOptions:
    """The options of ``DeskbatchClient.connect`` (its keyword arguments)."""

    token: str
    client_name: str | None = None
    reconnect: ReconnectOptions | bool = True
    on_tool_event: Callable[[ToolEvent], None] | None = None
    events: bool = True
    legacy_tools: bool = False
    agent_tools: list[AgentToolEntry] | None = None
    desktop: DesktopRequest | None = None
    on_desktop_wait: Callable[[DesktopWait], None] | None = None
    takeover: TakeoverRequest | None = None
    profile: ProfileRequest | None = None
    handshake_timeout: float = 10.0
    heartbeat: float | None = 15.0
    max_message_bytes: int | None = 64 * 1024 * 1024


class LinkHooks:
    """What the link asks of the client it serves (DeskbatchClient): the batches are the client's."""

    def message(self, msg: dict[str, Any]) -> None:
        """A message outside the hello exchange, from whichever socket (a result is valid from any of them)."""

    def adopted(self) -> None:
        """A socket completed hello and is the connection now: every waiting batch is sent."""

    def dropped(self) -> None:
        """The connection's socket closed: what only it could answer fails."""

    def session_lost(self) -> list[str]:
        """A reconnect found the session gone: the batches sent in it are rejected; returns their ids."""
        return []

    def gave_up(self, reason: GiveUpReason, why: str, cause: BaseException | None = None) -> None:
        """Reconnecting is over: every waiting batch is rejected, and the client closes."""

    def notify(self, event: str, *args: Any) -> None:
        """Raises one of the link's events (``disconnect``, ``reconnect``, ``session_lost``)."""


def parse_message(data: str | bytes) -> dict[str, Any] | None:
    """A daemon message, or None for what a v1 client skips (binary, not JSON, unknown or malformed)."""
    if not isinstance(data, str):
        return None
    try:
        msg = json.loads(data)
    except ValueError:
        return None
    if not isinstance(msg, dict):
        return None
    required = _REQUIRED.get(msg.get("type"))
    if required is None:
        return None
    for key, kind in required.items():
        if not isinstance(msg.get(key), kind):
            return None
    return msg


#: The fields each known message must have, and their JSON kinds (the daemon's schemas are stricter).
_REQUIRED: dict[Any, dict[str, Any]] = {
    "welcome": {"session_id": str, "toolsets": list, "limits": dict, "resumed": bool},
    "tool_event": {"batch_id": str, "tool_use_id": str, "phase": str, "index": int},
    "batch_result": {"batch_id": str, "tool_results": list, "failures": list, "cancelled": bool, "replayed": bool},
    "error": {"code": str, "message": str},
    "takeover": {"event": str},
    "desktop_wait": {"position": int, "waiting": int},
    "pong": {},
}


class _OpenSocket:
    """One socket, before and after it is adopted: its reader, its writer, and the hello waiting for an answer."""

    def __init__(self, link: ClientLink, socket: Socket) -> None:
        self.link = link
        self.socket = socket
        self.outbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.open = True
        self.waiter: asyncio.Future[dict[str, Any]] | None = None
        #: When the daemon last said it is alive while the hello waits (``desktop_wait``), in loop time.
        self.alive_at = 0.0
        loop = asyncio.get_running_loop()
        self.reader = loop.create_task(self._read())
        self.writer = loop.create_task(self._write())

    def send(self, frame: str) -> bool:
        if not self.open:
            return False
        self.outbox.put_nowait(frame)
        return True

    async def _write(self) -> None:
        # One writer per socket keeps frames in the order they were sent.
        while True:
            frame = await self.outbox.get()
            if frame is None:
                return
            try:
                await self.socket.send(frame)
            except Exception:  # the connection closed: the reader reports it
                return

    async def _read(self) -> None:
        try:
            async for data in self.socket.frames():
                msg = parse_message(data)
                if msg is not None:
                    self.link._on_message(self, msg)
            code, reason = await self.socket.closed()
        except Exception:  # pragma: no cover - a library error ends this socket like a drop
            self.socket.abort()
            code, reason = 1006, ""
        self.open = False
        self.outbox.put_nowait(None)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectError("the connection closed before the daemon answered hello"))
        self.link._on_socket_close(self, code, reason)

    async def hello(self, options: ConnectOptions, timeout: float, resume: str | None = None) -> dict[str, Any]:
        """Sends ``hello``; the answer: ``welcome``, or an ``error`` without a batch id."""
        if not self.open:
            raise ConnectError("the connection closed before hello")
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.alive_at = loop.time()
        self.send(json.dumps(hello_message(options, resume)))
        try:
            while True:
                # Each `desktop_wait` (the session is queued for a desktop) starts the hello's clock again.
                left = self.alive_at + timeout - loop.time()
                if left <= 0:
                    self.socket.abort()
                    raise ConnectError(f"no answer to hello within {timeout:g} s")
                try:
                    return await asyncio.wait_for(asyncio.shield(self.waiter), left)
                except asyncio.TimeoutError:
                    continue
        finally:
            self.waiter = None


def hello_message(options: ConnectOptions, resume: str | None) -> dict[str, Any]:
    hello: dict[str, Any] = {"type": "hello", "client": options.client_name or "deskbatch-python/1"}
    if resume:
        hello["resume_session_id"] = resume
    if options.events is False:
        hello["events"] = False
    if options.legacy_tools:
        hello["legacy_tools"] = True
    if options.agent_tools is not None:
        hello["tools"] = options.agent_tools
    if options.desktop is not None:
        hello["desktop"] = dict(options.desktop)
    if options.takeover is not None:
        hello["takeover"] = dict(options.takeover)
    if options.profile is not None:
        # Only a new session's hello is read for it; a resume keeps the session's lease.
        hello["profile"] = dict(options.profile)
    return hello


class ClientLink:
    """The connection of one DeskbatchClient: at most one adopted socket at a time, and the sockets closing."""

    def __init__(self, url: str, options: ConnectOptions, hooks: LinkHooks, target: LinkTarget | None = None) -> None:
        self.url = url
        #: A pinned session's reconnects: where each attempt goes (see LinkTarget).
        self.target = target
        self.options = options
        self.hooks = hooks
        if options.reconnect is False:
            self.reconnect_options = ReconnectOptions(max_attempts=0)
        elif options.reconnect is True:
            self.reconnect_options = DEFAULT_RECONNECT
        else:
            self.reconnect_options = options.reconnect
        self.state: ClientState = "connecting"
        self.welcome: Welcome | None = None
        self._current: _OpenSocket | None = None
        #: Every socket this client made that has not closed yet.
        self._sockets: set[_OpenSocket] = set()
        self._stopped = asyncio.Event()
        self._reconnecting: asyncio.Task[None] | None = None

    @property
    def is_closed(self) -> bool:
        return self.state == "closed"

    def send(self, frame: str) -> bool:
        """Sends a frame on the connection; False when there is none open."""
        current = self._current
        return current.send(frame) if current is not None else False

    async def connect(self) -> None:
        """The first connection: returns once ``welcome`` arrived; not retried."""
        link = await self._open()
        try:
            reply = await link.hello(self.options, self.options.handshake_timeout)
        except BaseException:
            link.socket.abort()
            raise
        if reply["type"] == "error":
            await link.socket.close()
            raise ConnectError(
                f"the daemon answered hello with {reply['code']}: {reply['message']}",
                reply["code"],
                retry_after_ms=reply.get("retry_after_ms"),
            )
        if self.is_closed:
            link.socket.abort()
            raise ConnectError("closed while connecting")
        self._adopt(link, cast(Welcome, reply))

    async def _open(self, url: str | None = None) -> _OpenSocket:
        socket = await Socket.open(
            url or self.url,
            self.options.token,
            open_timeout=self.options.handshake_timeout,
            heartbeat=self.options.heartbeat or None,
            max_message_bytes=self.options.max_message_bytes,
        )
        link = _OpenSocket(self, socket)
        self._sockets.add(link)
        return link

    def _on_message(self, link: _OpenSocket, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if link.waiter is not None and (kind == "welcome" or (kind == "error" and "batch_id" not in msg)):
            if not link.waiter.done():
                link.waiter.set_result(msg)
            return
        if kind == "desktop_wait":
            # The daemon is alive and the session is queued for a desktop: the hello's clock starts again.
            link.alive_at = asyncio.get_running_loop().time()
            if self.options.on_desktop_wait is not None:
                call_hook(self.options.on_desktop_wait, cast(DesktopWait, msg))
            return
        if kind == "welcome":
            if self.welcome is not None and msg["session_id"] == self.welcome["session_id"]:
                self.welcome = cast(Welcome, msg)
            return
        self.hooks.message(msg)

    def _adopt(self, link: _OpenSocket, welcome: Welcome) -> None:
        """Makes a socket that completed hello the client's connection, and sends every waiting batch."""
        self._current = link
        self.welcome = welcome
        self.state = "open"
        self.hooks.adopted()

    def _on_socket_close(self, link: _OpenSocket, code: int, reason: str) -> None:
        self._sockets.discard(link)
        if link is not self._current:
            return  # a socket that never became (or no longer is) the connection
        self._current = None
        self.hooks.dropped()
        if self.is_closed:
            return
        # Another connection resumed our session: taking it back would make two clients fight over it.
        stay = code != CLOSE_SESSION_RESUMED and self.reconnect_options.max_attempts > 0
        if stay:
            self.state = "reconnecting"
        self.hooks.notify("disconnect", {"code": code, "reason": reason})
        if code == CLOSE_SESSION_RESUMED:
            self.hooks.gave_up("session_taken", "another connection took over the session")
            return
        if not stay:
            self.hooks.gave_up("connection_lost", f"the connection closed ({code}) and reconnecting is off")
            return
        self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        options = self.reconnect_options
        lost_session_id: str | None = None
        rejected: list[str] = []
        last_error: BaseException | None = None
        for attempt in range(1, options.max_attempts + 1):
            base = min(options.max_delay, options.initial_delay * 2 ** (attempt - 1))
            await self._backoff(base / 2 + random.random() * base / 2)
            if self.is_closed:
                return
            try:
                where = await self.target.next() if self.target is not None else self.url
                if self.is_closed:
                    return
                if isinstance(where, Gone):
                    self.hooks.gave_up("session_lost", where.why)
                    return
                link = await self._open(where)
            except (ConnectError, HandshakeRefusedError) as err:
                last_error = err
                if self.is_closed:
                    return
                if isinstance(err, HandshakeRefusedError) and err.status == 401 and self.target is not None:
                    # The token that opened the pod no longer does: the pod was replaced (a new uid, a new token).
                    self.hooks.gave_up("session_lost", "the pod that held the session no longer takes its token", err)
                    return
                if isinstance(err, HandshakeRefusedError) and err.permanent:
                    break
                continue
            try:
                resume_id = self.welcome["session_id"] if lost_session_id is None and self.welcome else None
                reply = await link.hello(self.options, self.options.handshake_timeout, resume_id)
                if resume_id is not None and _is_session_gone(reply, resume_id) and self.target is not None:
                    # A pinned session is not started anew here (see LinkTarget).
                    link.socket.abort()
                    self.hooks.gave_up("session_lost", f"the daemon at {where} no longer has the session")
                    return
                if resume_id is not None and _is_session_gone(reply, resume_id):
                    lost_session_id = resume_id
                    # Sent in the lost session: their outcome is unknown, and they are never sent again.
                    rejected = self.hooks.session_lost()
                    if reply["type"] == "error":
                        reply = await link.hello(self.options, self.options.handshake_timeout)
                if reply["type"] == "error":
                    raise ConnectError(f"hello: {reply['code']}: {reply['message']}", reply["code"])
                if self.is_closed:
                    link.socket.abort()
                    return
                welcome = cast(Welcome, reply)
                self._adopt(link, welcome)
                if lost_session_id is None:
                    self.hooks.notify("reconnect", welcome)
                else:
                    self.hooks.notify(
                        "session_lost",
                        {"previous_session_id": lost_session_id, "welcome": welcome, "rejected_batch_ids": rejected},
                    )
                return
            except ConnectError as err:
                last_error = err
                link.socket.abort()
                if self.is_closed:
                    return
        if self.is_closed:
            return
        why = str(last_error) if last_error is not None else "no attempt left"
        self.hooks.gave_up("connection_lost", f"could not reconnect to the daemon ({why})", last_error)

    async def _backoff(self, seconds: float) -> None:
        """Waits ``seconds``, or less if the client closes meanwhile."""
        try:
            await asyncio.wait_for(self._stopped.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def stop(self) -> None:
        """Stops for good (DeskbatchClient.close): no reconnect; a backoff under way ends now."""
        self.state = "closed"
        self._stopped.set()

    async def close_sockets(self) -> None:
        """Closes every socket this client made, waiting for each to close (a short while at most)."""
        self._current = None
        # A reconnect attempt under way stops first, so no socket opens after the ones closed here.
        if self._reconnecting is not None and not self._reconnecting.done():
            self._reconnecting.cancel()
            await asyncio.gather(self._reconnecting, return_exceptions=True)
        sockets = list(self._sockets)
        await asyncio.gather(*(s.socket.close(1000, "client closed") for s in sockets), return_exceptions=True)
        await asyncio.gather(*(s.reader for s in sockets), return_exceptions=True)


def _is_session_gone(reply: dict[str, Any], resume_id: str) -> bool:
    if reply["type"] == "error":
        return bool(reply["code"] == "session_not_found")
    return bool(reply["session_id"] != resume_id)


def call_hook(hook: Callable[..., Any], *args: Any) -> None:
    """Calls a listener: its exception must not break the client's bookkeeping; the loop's handler reports it."""
    try:
        hook(*args)
    except Exception as err:
        asyncio.get_running_loop().call_exception_handler(
            {"message": f"a deskbatch listener ({getattr(hook, '__name__', hook)!r}) raised", "exception": err}
        )
