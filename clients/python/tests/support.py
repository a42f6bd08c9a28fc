"""What the tests share: the daemons test/python-client.test.ts started, a TCP proxy the tests cut, the daemon's
metrics, and tool_use blocks as the Messages API sends them.

The daemons are real (started by testkit/ in the node test, which passes their URLs and token in the
environment): ``DESKBATCH_URL`` has an X display (1024x768) and a headless browser; ``DESKBATCH_SHORT_GRACE_URL``
has neither, and ends a session 300 ms after its connection dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
import urllib.request
from collections.abc import Awaitable
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

#: Every test's own deadline: a test waits for what it set in motion, never for a fixed time.
TEST_DEADLINE_S = 90.0


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: these tests run against real daemons that test/python-client.test.ts starts "
            "(npm test, or: node --import tsx --test test/python-client.test.ts)"
        )
    return value


URL = env("DESKBATCH_URL")
SHORT_GRACE_URL = env("DESKBATCH_SHORT_GRACE_URL")
TOKEN = env("DESKBATCH_TOKEN")

COMPUTER_NOT_EXECUTED = "Not executed: an earlier computer action in this turn failed."


def run(coro: Awaitable[T], deadline: float = TEST_DEADLINE_S) -> T:
    """Runs a test's coroutine on a fresh event loop, failing it when it has not finished by the deadline."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, deadline)

    return asyncio.run(bounded())


_ids = itertools.count()


def tool_use(toolset: str | None, name: str, input: dict[str, Any] | None = None, id: str | None = None):
    """A tool_use block as the Messages API returns it."""
    block: dict[str, Any] = {"type": "tool_use", "id": id or f"toolu_py{next(_ids):04d}", "name": name}
    if toolset is not None:
        block["toolset_name"] = toolset
    block["input"] = input if input is not None else {}
    return block


def computer(name: str, input: dict[str, Any] | None = None, id: str | None = None):
    return tool_use("computer", name, input, id)


def browser(name: str, input: dict[str, Any] | None = None, id: str | None = None):
    return tool_use("browser", name, input, id)


def texts(result: dict[str, Any]) -> list[str]:
    return [b["text"] for b in result["content"] if b["type"] == "text"]


async def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Polls ``cond`` (a wait for something the test set in motion, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------- the daemon's metrics

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    """The daemon's /metrics (with the token), as (name, labels, value) samples."""
    parts = urlsplit(url)
    request = urllib.request.Request(f"http://{parts.netloc}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode("utf-8")
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            samples.append((match[1], dict(_LABEL.findall(match[2] or "")), float(match[3])))
    return samples


async def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
    samples = await asyncio.get_running_loop().run_in_executor(None, metrics, url)
    return sum(v for n, lb, v in samples if n == name and all(lb.get(k) == w for k, w in labels.items()))


# ---------------------------------------------------------------- a TCP proxy the tests can cut


class Proxy:
    """A TCP proxy between client and daemon: ``cut()`` drops every connection both ways (a network failure),
    ``hold()`` keeps new connections waiting unanswered until ``release()``, ``close()`` refuses new ones."""

    def __init__(self, daemon_url: str) -> None:
        self.port = urlsplit(daemon_url).port
        self.accepted = 0
        self.url = ""
        self._held: list[asyncio.StreamWriter] | None = None
        self._held_readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self._live: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._held is not None:
            self._held.append(writer)
            self._held_readers[writer] = reader
            return
        await self._pipe(reader, writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._live.update(pair)

        def drop() -> None:
            for w in pair:
                self._live.discard(w)
                w.transport.abort()

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                drop()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def cut(self) -> None:
        for writer in list(self._live):
            writer.transport.abort()
        self._live.clear()

    def hold(self) -> None:
        if self._held is None:
            self._held = []

    def release(self) -> None:
        held, self._held = self._held or [], None
        for writer in held:
            reader = self._held_readers.pop(writer)
            if not writer.transport.is_closing():
                task = asyncio.get_running_loop().create_task(self._pipe(reader, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in self._held or []:
            writer.transport.abort()
        self._held = None
        self.cut()
        for task in list(self._tasks):
            task.cancel()
