"""The one place that knows the ``websockets`` library: opening a client socket, sending, receiving, closing.

Two asyncio APIs are in use: ``websockets.asyncio.client`` (websockets 13 and later, the default since 14) and
the older ``websockets.connect`` / ``WebSocketClientProtocol`` (10.x to 12.x; Debian 12 ships 10.4). Both are
driven the same way here; only the keyword names, the handshake's refusal and, from 15 on, the proxy setting
differ.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .errors import ConnectError, HandshakeRefusedError

try:  # websockets >= 13
    from websockets.asyncio.client import connect as _connect

    _NEW_API = True
except ImportError:  # websockets 10.x - 12.x
    from websockets.legacy.client import connect as _connect  # type: ignore[assignment,unused-ignore]

    _NEW_API = False

#: websockets >= 15 reads a proxy from the environment unless told not to; the daemon is reached directly.
_TAKES_PROXY = "proxy" in inspect.signature(_connect).parameters

#: How long closing waits for the daemon's close frame before the connection is dropped.
CLOSE_WAIT_S = 1.0

#: Which API is in use, for diagnostics: ``"asyncio"`` (websockets >= 13) or ``"legacy"``.
API = "asyncio" if _NEW_API else "legacy"
VERSION = getattr(websockets, "__version__", "?")


def _refused_status(exc: BaseException) -> int | None:
    """The HTTP status of a refused handshake: ``InvalidStatus.response`` (new), ``InvalidStatusCode`` (legacy)."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


class Socket:
    """One open client WebSocket."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    @staticmethod
    async def open(
        url: str,
        token: str,
        *,
        open_timeout: float,
        heartbeat: float | None,
        max_message_bytes: int | None,
    ) -> Socket:
        """Opens a socket with the token in ``Authorization: Bearer`` (never in the URL).

        Raises HandshakeRefusedError (the daemon answered with an HTTP status) or ConnectError.
        """
        headers = [("Authorization", f"Bearer {token}")]
        kwargs: dict[str, Any] = {
            "open_timeout": open_timeout,
            # The library's keepalive is the heartbeat: a peer that misses a pong is dropped (and reconnected).
            "ping_interval": heartbeat,
            "ping_timeout": heartbeat,
            "close_timeout": CLOSE_WAIT_S,
            "max_size": max_message_bytes,
        }
        kwargs["additional_headers" if _NEW_API else "extra_headers"] = headers
        if _TAKES_PROXY:
            kwargs["proxy"] = None
        try:
            ws = await _connect(url, **kwargs)
        except InvalidHandshake as exc:
            status = _refused_status(exc)
            if status is not None:
                raise HandshakeRefusedError(status) from None
            raise ConnectError(f"could not connect to {url}: {exc}") from exc
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectError(f"could not connect to {url}: {exc or type(exc).__name__}") from exc
        return Socket(ws)

    async def send(self, frame: str) -> None:
        await self._ws.send(frame)

    async def frames(self) -> AsyncIterator[str | bytes]:
        """The frames received, until the connection closes (cleanly or not)."""
        try:
            async for frame in self._ws:
                yield frame
        except ConnectionClosed:
            pass

    async def closed(self) -> tuple[int, str]:
        """Waits until the connection is closed; its close code (1006 when it was dropped) and reason."""
        await self._ws.wait_closed()
        code = self._ws.close_code
        return (code if isinstance(code, int) else 1006, self._ws.close_reason or "")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes with a close frame, waiting for the daemon's at most ``CLOSE_WAIT_S``; then drops it."""
        try:
            await asyncio.wait_for(self._ws.close(code, reason), CLOSE_WAIT_S * 2)
        except (asyncio.TimeoutError, OSError, ConnectionClosed):
            self.abort()

    def abort(self) -> None:
        """Drops the connection at once, without a close frame (a half-open connection, a hello timeout)."""
        transport = getattr(self._ws, "transport", None)
        if transport is not None:
            transport.abort()
