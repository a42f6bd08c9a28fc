"""DeskbatchClient: one WebSocket to a deskbatch daemon (docs/PROTOCOL.md), with hello -> welcome, batches, tool
events, cancel, and reconnects that can never cause a second click (src/client/client.ts in Python):

- Batch ids are made here, once per batch, so a batch sent again after a reconnect carries the same id and the
  same bytes; the daemon then answers with its stored result (``replayed: True``) instead of running it again.
- After a drop the client reconnects with backoff and resumes the session (``hello.resume_session_id``), then
  sends every batch still waiting for its result again, in order.
- If the daemon no longer has the session (``session_not_found``), the batches that were sent in it fail with
  ``SessionLostError``: their outcome is unknown, and they are never sent into the new session.

The socket, the hello, heartbeats and reconnects are the link's (link.py); this module holds the batches,
cancels, help requests and the events.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import uuid
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from .content import SplitToolUses, block_field, split_tool_uses
from .errors import (
    BatchRefusedError,
    ClientClosedError,
    ConnectionLostError,
    DeskbatchError,
    SessionLostError,
)
from .link import (
    ClientLink,
    LinkTarget,
    ClientState,
    ConnectOptions,
    GiveUpReason,
    LinkHooks,
    ReconnectOptions,
    call_hook,
)
from .protocol import (
    PROTOCOL_PATH,
    TOOLSET_TYPES,
    AgentToolEntry,
    BatchResult,
    DesktopRequest,
    DesktopWait,
    ErrorMessage,
    ProfileRequest,
    Size,
    TakeoverRequest,
    ToolEvent,
    ToolResult,
    ToolsetInfo,
    ToolsetTool,
    Welcome,
)

_BATCH_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: After ``rate_limited`` (a frame dropped unread), waiting batches are sent again after this long.
_RATE_LIMIT_RESEND_S = 1.0

#: The events of ``client.on(name, listener)``, and what each listener is called with.
EVENTS = (
    "tool_event",  # ToolEvent: every tool_event of this client's batches
    "daemon_error",  # ErrorMessage: an error frame not tied to a batch of this client (rate_limited, internal, ...)
    "takeover",  # TakeoverMessage (only with takeover=): help acknowledged, control taken, handed back
    "disconnect",  # {"code", "reason"}: the socket dropped; the client is reconnecting unless it gave up
    "reconnect",  # Welcome: reconnected and resumed the same session; waiting batches were sent again
    "session_lost",  # {"previous_session_id", "welcome", "rejected_batch_ids"}: a new session was started
    "close",  # nothing: the client closed
)

B = TypeVar("B")


@dataclass(frozen=True)
class RunBatchResult:
    #: One ``tool_result`` per tool_use, in order: put them first in the next user message, unchanged.
    tool_results: list[ToolResult]
    #: The whole ``batch_result`` (failures with full errors, ``halted``, ``cancelled``, ``replayed``, screenshots).
    result: BatchResult


class _PendingBatch:
    def __init__(
        self,
        batch_id: str,
        frame: str,
        tool_use_ids: list[str],
        on_tool_event: Callable[[ToolEvent], None] | None,
        future: asyncio.Future[RunBatchResult],
    ) -> None:
        self.batch_id = batch_id
        #: The batch frame, serialised once so every resend is byte-identical.
        self.frame = frame
        self.tool_use_ids = tool_use_ids
        #: Times the frame was handed to a socket.
        self.sends = 0
        #: The session it was last sent in.
        self.session_id: str | None = None
        self.cancel_requested = False
        self.on_tool_event = on_tool_event
        self.future = future


class _Hooks(LinkHooks):
    def __init__(self, client: DeskbatchClient) -> None:
        self.client = client

    def message(self, msg: dict[str, Any]) -> None:
        self.client._route(msg)

    def adopted(self) -> None:
        for p in list(self.client._pending.values()):
            self.client._send_batch(p)

    def dropped(self) -> None:
        # A help request not yet answered may not have reached the daemon: its caller may ask again.
        waiters, self.client._help_waiters = self.client._help_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(DeskbatchError("the connection closed"))

    def session_lost(self) -> list[str]:
        return self.client._fail_pending(
            lambda p: p.sends > 0,
            lambda p: SessionLostError(p.batch_id, p.session_id, True, p.tool_use_ids),
        )

    def gave_up(self, reason: GiveUpReason, why: str, cause: BaseException | None = None) -> None:
        self.client._give_up(reason, why, cause)

    def notify(self, event: str, *args: Any) -> None:
        self.client._notify(event, *args)


class _Connecting:
    """What ``DeskbatchClient.connect`` returns: await it for the client, or use it in ``async with``."""

    def __init__(self, url: str, options: ConnectOptions) -> None:
        self._url = url
        self._options = options
        self._client: DeskbatchClient | None = None

    async def _connect(self) -> DeskbatchClient:
        return await DeskbatchClient(self._url, self._options)._open()

    def __await__(self) -> Generator[Any, None, DeskbatchClient]:
        return self._connect().__await__()

    async def __aenter__(self) -> DeskbatchClient:
        self._client = await self._connect()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()


class DeskbatchClient:
    """A typed client for one session of a deskbatch daemon.

    ::

        async with DeskbatchClient.connect("ws://127.0.0.1:8765/v1", token=token) as client:
            tools = client.tools  # the tools[] entries for the Messages API
            split = client.split_tool_uses(message.content)
            run = await client.run_batch(split.deskbatch)
            user_content = merge_tool_results(message.content, run.tool_results, my_results)
    """

    def __init__(self, url: str, options: ConnectOptions, target: LinkTarget | None = None) -> None:
        """Use ``DeskbatchClient.connect`` (or ``connect_fleet``)."""
        self._url = url
        #: Where connect_fleet placed the session (a FleetPlacement), None for ``connect``.
        self.placement: Any = None
        #: The session its pinned pod no longer holds (later batches fail with SessionLostError), and why.
        self._lost_session_id: str | None = None
        self._lost_why = ""
        self._options = options
        self._pending: dict[str, _PendingBatch] = {}
        self._listeners: dict[str, list[Callable[..., Any]]] = {name: [] for name in EVENTS}
        self._help_waiters: list[asyncio.Future[str]] = []
        self._resend: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._link = ClientLink(url, options, _Hooks(self), target)

    async def _open(self) -> DeskbatchClient:
        """Makes the first connection (hello, welcome); closes this client if it fails."""
        try:
            await self._link.connect()
        except BaseException:
            await self.close()
            raise
        return self

    @staticmethod
    def connect(
        url: str,
        *,
        token: str,
        client_name: str | None = None,
        reconnect: ReconnectOptions | bool = True,
        on_tool_event: Callable[[ToolEvent], None] | None = None,
        events: bool = True,
        legacy_tools: bool = False,
        agent_tools: list[AgentToolEntry] | None = None,
        desktop: DesktopRequest | None = None,
        on_desktop_wait: Callable[[DesktopWait], None] | None = None,
        takeover: TakeoverRequest | None = None,
        profile: ProfileRequest | None = None,
        handshake_timeout: float = 10.0,
        heartbeat: float | None = 15.0,
        max_message_bytes: int | None = 64 * 1024 * 1024,
    ) -> _Connecting:
        """Connects, sends ``hello`` and returns once ``welcome`` arrived (await it, or ``async with`` it).

        ``url`` is the daemon's ``ws://host:port/v1`` (a bare ``ws://host:port`` gets ``/v1``). Raises
        ``HandshakeRefusedError`` (HTTP status) or ``ConnectError``; the first connection is not retried.

        - ``token``: the daemon's bearer token, sent as ``Authorization: Bearer`` (never in the URL).
        - ``client_name``: ``hello.client``, for the daemon's logs.
        - ``reconnect``: ``ReconnectOptions``, or False to never reconnect.
        - ``on_tool_event``: called with every ``tool_event`` (also ``client.on("tool_event", ...)``).
        - ``events=False``: ``hello.events``, no ``tool_event`` frames at all (one frame per batch).
        - ``legacy_tools=True``: asks for ``welcome["legacy_tools"]``, the older computer tools' entries.
        - ``agent_tools``: the ``tools[]`` the agent sends to the Messages API (``hello.tools``): the session runs
          only what the model was offered, and refuses a member the agent's ``configs`` switched off.
        - ``desktop``: ``hello.desktop`` (``{"when_busy": "refuse"}`` fails at once with ConnectError
          ``no_desktop`` when every desktop is in use; ``"wait"`` queues, each ``desktop_wait`` resetting the hello
          timeout and calling ``on_desktop_wait``).
        - ``takeover``: ``hello.takeover`` (``{"when_held": "refuse"}`` makes a batch sent while a person holds the
          desktop fail with BatchRefusedError ``desktop_held``); asks for ``takeover`` events.
        - ``profile``: ``hello.profile`` (``{"name": ..., "mode": "read_write" | "read_only"}``).
        - ``handshake_timeout``: seconds for the HTTP upgrade and, separately, for the answer to ``hello``.
        - ``heartbeat``: WebSocket ping interval in seconds; a peer that misses one is dropped (and reconnected);
          None disables it.
        - ``max_message_bytes``: the largest daemon message accepted (a batch_result carries its images).
        """
        parts = urlsplit(url)
        if parts.path in ("", "/"):
            url = urlunsplit(parts._replace(path=PROTOCOL_PATH))
        options = ConnectOptions(
            token=token,
            client_name=client_name,
            reconnect=reconnect,
            on_tool_event=on_tool_event,
            events=events,
            legacy_tools=legacy_tools,
            agent_tools=agent_tools,
            desktop=desktop,
            on_desktop_wait=on_desktop_wait,
            takeover=takeover,
            profile=profile,
            handshake_timeout=handshake_timeout,
            heartbeat=heartbeat,
            max_message_bytes=max_message_bytes,
        )
        return _Connecting(url, options)

    async def __aenter__(self) -> DeskbatchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ state

    @property
    def url(self) -> str:
        return self._url

    @property
    def state(self) -> ClientState:
        return self._link.state

    @property
    def welcome(self) -> Welcome:
        """The latest ``welcome`` (a new one after every reconnect)."""
        welcome = self._link.welcome
        if welcome is None:
            raise DeskbatchError("not connected yet")
        return welcome

    @property
    def session_id(self) -> str:
        return self.welcome["session_id"]

    @property
    def toolsets(self) -> list[ToolsetInfo]:
        """The toolsets the daemon serves, with their members and texts."""
        return self.welcome["toolsets"]

    @property
    def toolset_names(self) -> list[str]:
        """The ``toolset_name``\\ s the daemon serves (``computer``, ``browser``)."""
        return [t["toolset_name"] for t in self.toolsets]

    @property
    def tools(self) -> list[ToolsetTool]:
        """The ``tools[]`` entries to pass to the Messages API: only the members this daemon serves are offered."""
        return [copy.deepcopy(t["tool"]) for t in self.toolsets if t["tool"]["type"] in TOOLSET_TYPES]

    @property
    def display(self) -> Size | None:
        """The display's size (absent while the daemon's X display is unreachable)."""
        return self.welcome.get("display")

    @property
    def screenshot(self) -> Size | None:
        """The screenshot size: the coordinate space of the computer members."""
        return self.welcome.get("screenshot")

    @property
    def pending_batch_ids(self) -> list[str]:
        """Ids of the batches still waiting for their result."""
        return list(self._pending)

    def split_tool_uses(self, assistant_content: Sequence[B]) -> SplitToolUses[B]:
        """``split_tool_uses`` with the toolsets this daemon serves (and the older ``computer`` tool with
        ``legacy_tools``)."""
        return split_tool_uses(assistant_content, self.toolset_names, legacy_computer=self._options.legacy_tools)

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], None]:
        """Calls ``listener`` on ``event`` (one of ``EVENTS``); returns a function that removes it."""
        if event not in self._listeners:
            raise ValueError(f"unknown event {event!r}; the events are: {', '.join(EVENTS)}")
        self._listeners[event].append(listener)

        def remove() -> None:
            if listener in self._listeners[event]:
                self._listeners[event].remove(listener)

        return remove

    # ------------------------------------------------------------ batches

    async def run_batch(
        self,
        tool_uses: Sequence[Any],
        *,
        batch_id: str | None = None,
        on_tool_event: Callable[[ToolEvent], None] | None = None,
    ) -> RunBatchResult:
        """Runs the turn's toolset calls as one batch and returns the daemon's ``batch_result``.

        ``tool_uses`` are the ``tool_use`` blocks as the Messages API returned them (dicts or SDK objects).
        Survives reconnects (the batch is sent again with the same id and answered from the daemon's stored
        result). Raises ``BatchRefusedError`` (nothing ran), ``BatchOutcomeUnknownError`` and its subclasses, or
        ``ValueError`` for a bad argument. ``cancel(batch_id)`` stops it at the daemon (it still returns the
        cancelled result); cancelling the task that awaits it sends the same ``cancel`` and forgets the batch.
        """
        batch_id = batch_id if batch_id is not None else f"b-{uuid.uuid4()}"
        wire = [_to_wire(tu) for tu in tool_uses]
        ids = [str(tu["id"]) for tu in wire]
        if self._link.is_closed and self._lost_session_id is not None:
            raise SessionLostError(batch_id, self._lost_session_id, False, ids, self._lost_why)
        if self._link.is_closed:
            raise ClientClosedError("closed", "the client is closed", batch_id, None, False, ids)
        if not wire:
            raise ValueError("run_batch needs at least one tool_use")
        if not _BATCH_ID.match(batch_id):
            raise ValueError(f"invalid batch_id {json.dumps(batch_id)}: 1–128 of [A-Za-z0-9._:-]")
        if batch_id in self._pending:
            raise ValueError(f"batch {batch_id} is already running")
        frame = json.dumps({"type": "batch", "batch_id": batch_id, "tool_uses": wire}, ensure_ascii=False)
        limits = self.welcome["limits"]
        size = len(frame.encode("utf-8"))
        if size > limits["max_payload_bytes"]:
            why = f"the batch frame is {size} bytes; the daemon accepts at most {limits['max_payload_bytes']}"
            raise BatchRefusedError("batch_too_large", why, batch_id)
        if len(wire) > limits["max_tool_uses"]:
            why = f"{len(wire)} tool_uses; the daemon accepts at most {limits['max_tool_uses']} per batch"
            raise BatchRefusedError("batch_too_large", why, batch_id)

        future: asyncio.Future[RunBatchResult] = asyncio.get_running_loop().create_future()
        p = _PendingBatch(batch_id, frame, ids, on_tool_event, future)
        self._pending[batch_id] = p
        if self.state == "open":
            self._send_batch(p)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                # The caller stopped waiting: the daemon stops the batch too, and its result is not waited for.
                self._settle(p)
                future.cancel()
                if p.sends > 0:
                    self._link.send(json.dumps({"type": "cancel", "batch_id": batch_id}))
            raise

    def cancel(self, batch_id: str) -> bool:
        """Stops a batch of this client: ``run_batch`` then returns the daemon's cancelled result (the running call
        and the later ones answered with their toolset's cancelled text). A batch not sent yet (the client is
        reconnecting) is dropped, and its ``run_batch`` raises ``asyncio.CancelledError``. Returns False when no
        such batch is waiting."""
        p = self._pending.get(batch_id)
        if p is None:
            return False
        if p.sends == 0:
            self._settle(p)
            p.future.cancel()
            return True
        p.cancel_requested = True
        if self.state == "open":
            self._link.send(json.dumps({"type": "cancel", "batch_id": batch_id}))
        return True

    def _send_batch(self, p: _PendingBatch) -> None:
        if not self._link.send(p.frame):
            return
        p.sends += 1
        p.session_id = self._link.welcome["session_id"] if self._link.welcome else None
        if p.cancel_requested:
            self._link.send(json.dumps({"type": "cancel", "batch_id": p.batch_id}))

    def _settle(self, p: _PendingBatch) -> None:
        self._pending.pop(p.batch_id, None)

    def _fail_pending(
        self, which: Callable[[_PendingBatch], bool], make: Callable[[_PendingBatch], BaseException]
    ) -> list[str]:
        """Fails the batches ``which`` selects with the error ``make`` builds; returns their ids."""
        failed: list[str] = []
        for p in list(self._pending.values()):
            if not which(p):
                continue
            self._settle(p)
            failed.append(p.batch_id)
            if not p.future.done():
                p.future.set_exception(make(p))
        return failed

    def _route(self, msg: dict[str, Any]) -> None:
        """Messages outside the hello exchange, from whichever socket (a result is valid from any of them)."""
        kind = msg["type"]
        if kind == "tool_event":
            event = cast(ToolEvent, msg)
            p = self._pending.get(event["batch_id"])
            if p is not None and p.on_tool_event is not None:
                call_hook(p.on_tool_event, event)
            if self._options.on_tool_event is not None:
                call_hook(self._options.on_tool_event, event)
            self._notify("tool_event", event)
        elif kind == "batch_result":
            result = cast(BatchResult, msg)
            p = self._pending.get(result["batch_id"])
            if p is None:
                return  # a duplicate (a resend answered twice) or not ours
            self._settle(p)
            if not p.future.done():
                p.future.set_result(RunBatchResult(tool_results=result["tool_results"], result=result))
        elif kind == "error":
            self._on_error(cast(ErrorMessage, msg))
        elif kind == "takeover":
            if msg["event"] == "help_requested" and self._help_waiters:
                waiter = self._help_waiters.pop(0)
                if not waiter.done():
                    waiter.set_result(str(msg.get("request_id", "")))
            self._notify("takeover", msg)
        # `pong`: nothing to do; `welcome` and `desktop_wait` are the link's.

    async def request_help(self, reason: str) -> str:
        """Asks for a person (``help``, only when ``welcome["capabilities"]`` lists ``help``): returns the request's
        id once the daemon has it. Then watch the ``takeover`` event: ``started``, and ``ended`` with the outcome
        and the person's note."""
        if "help" not in self.welcome.get("capabilities", []):
            raise DeskbatchError(
                "this daemon does not take help requests (connect with `takeover`, and --allow-takeover)"
            )
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if not self._link.send(json.dumps({"type": "help", "reason": reason})):
            raise DeskbatchError("not connected")
        self._help_waiters.append(waiter)
        return await waiter

    def _on_error(self, msg: ErrorMessage) -> None:
        batch_id = msg.get("batch_id")
        p = self._pending.get(batch_id) if batch_id is not None else None
        if batch_id is None and msg["code"] == "help_unavailable" and self._help_waiters:
            # The answer to the oldest help request.
            waiter = self._help_waiters.pop(0)
            if not waiter.done():
                waiter.set_exception(DeskbatchError(f"help refused ({msg['code']}): {msg['message']}"))
            return
        if msg["code"] == "rate_limited":
            # The daemon dropped one of our frames unread; sending the waiting batches again is safe (replay).
            self._schedule_resend()
            self._notify("daemon_error", msg)
            return
        # `unknown_batch` answers a cancel: nothing to do. A resend refused by a daemon that is shutting down
        # may have run the first time: keep it; the reconnect after the shutdown settles it.
        if p is None or msg["code"] == "unknown_batch" or (msg["code"] == "shutting_down" and p.sends > 1):
            self._notify("daemon_error", msg)
            return
        self._settle(p)
        if not p.future.done():
            p.future.set_exception(
                BatchRefusedError(msg["code"], msg["message"], p.batch_id, msg.get("retry_after_ms"))
            )

    def _schedule_resend(self) -> None:
        if self._resend is not None:
            return

        def resend() -> None:
            self._resend = None
            if self.state == "open":
                for p in list(self._pending.values()):
                    self._send_batch(p)

        self._resend = asyncio.get_running_loop().call_later(_RATE_LIMIT_RESEND_S, resend)

    # ------------------------------------------------------------ connection

    def _give_up(self, reason: GiveUpReason, why: str, cause: BaseException | None) -> None:
        """Reconnecting is over: every waiting batch fails (outcome unknown when it was sent), and the client
        closes."""
        if reason == "session_lost":
            # A pinned session its pod no longer holds: this batch and every later one get SessionLostError.
            session_id = self._link.welcome["session_id"] if self._link.welcome else None
            self._lost_session_id = session_id or ""
            self._lost_why = why

            def lost(p: _PendingBatch) -> BaseException:
                sent = p.sends > 0
                err = SessionLostError(p.batch_id, p.session_id if sent else session_id, sent, p.tool_use_ids, why)
                err.__cause__ = cause
                return err

            self._fail_pending(lambda p: True, lost)
            self._start_close()
            return

        def make(p: _PendingBatch) -> BaseException:
            if p.sends > 0:
                message = f"{why}: the outcome of batch {p.batch_id} is unknown, some of its calls may have run"
            else:
                message = f"{why}: batch {p.batch_id} was never sent, nothing ran"
            err = ConnectionLostError(reason, message, p.batch_id, p.session_id, p.sends > 0, p.tool_use_ids)
            err.__cause__ = cause
            return err

        self._fail_pending(lambda p: True, make)
        self._start_close()

    def _start_close(self) -> asyncio.Task[None]:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._shutdown())
        return self._closing

    async def close(self) -> None:
        """Closes the connection and stops reconnecting; no task or socket is left.

        Batches still waiting fail with ``ClientClosedError`` (the daemon cancels what it was running for them).
        Idempotent.
        """
        await asyncio.shield(self._start_close())

    async def _shutdown(self) -> None:
        self._link.stop()
        if self._resend is not None:
            self._resend.cancel()
            self._resend = None

        def make(p: _PendingBatch) -> BaseException:
            if p.sends > 0:
                message = f"the client was closed before batch {p.batch_id} had its result; its outcome is unknown"
            else:
                message = f"the client was closed before batch {p.batch_id} was sent; nothing ran"
            return ClientClosedError("closed", message, p.batch_id, p.session_id, p.sends > 0, p.tool_use_ids)

        self._fail_pending(lambda p: True, make)
        await self._link.close_sockets()
        self._notify("close")

    # ------------------------------------------------------------ events

    def _notify(self, event: str, *args: Any) -> None:
        for listener in list(self._listeners.get(event, ())):
            call_hook(listener, *args)


def _to_wire(tool_use: Any) -> dict[str, Any]:
    """The wire form of a tool_use: the API block's own fields (serialised at once, so every resend is the same)."""
    if block_field(tool_use, "type") != "tool_use":
        raise ValueError(f"not a tool_use block: {tool_use!r:.200}")
    wire: dict[str, Any] = {
        "type": "tool_use",
        "id": block_field(tool_use, "id"),
        "name": block_field(tool_use, "name"),
    }
    toolset_name = block_field(tool_use, "toolset_name")
    if toolset_name is not None:
        wire["toolset_name"] = toolset_name
    wire["input"] = block_field(tool_use, "input")
    return wire
