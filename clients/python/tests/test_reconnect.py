"""Dropped connections, made with a TCP proxy the test cuts (so the client sees a real network failure).

"Ran once" is proved by what a second run would change: the daemon's own count of the calls it ran
(``deskbatch_calls_total`` and ``deskbatch_batch_replays_total`` on /metrics), the ``started`` events (a replayed
batch sends none), and where the pointer is.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from deskbatch import (
    ClientClosedError,
    ConnectionLostError,
    DeskbatchClient,
    ReconnectOptions,
    SessionLostError,
)
from deskbatch._websocket import Socket

from support import SHORT_GRACE_URL, TOKEN, URL, Proxy, computer, metric, run, texts, until

#: Fast reconnects for tests; attempts are plenty so a slow machine never runs out.
FAST = ReconnectOptions(max_attempts=200, initial_delay=0.02, max_delay=0.1)


def connect(url, **kwargs):
    return DeskbatchClient.connect(url, token=TOKEN, client_name="python-tests/1", reconnect=FAST, **kwargs)


def next_event(client, name):
    """A future that gets the arguments of ``client``'s next ``name`` event."""
    future = asyncio.get_running_loop().create_future()

    def listener(*args):
        if not future.done():
            future.set_result(args)

    client.on(name, listener)
    return future


def test_a_drop_mid_batch_resumes_and_the_same_batch_id_is_answered_from_the_store_nothing_ran_twice():
    async def go():
        moves = lambda: metric(URL, "deskbatch_calls_total", member="mouse_move", outcome="succeeded")
        replays = lambda: metric(URL, "deskbatch_batch_replays_total")
        moves_before, replays_before = await moves(), await replays()
        started = []
        async with Proxy(URL) as proxy, connect(proxy.url) as client:
            session = client.session_id
            disconnected = next_event(client, "disconnect")
            reconnected = next_event(client, "reconnect")
            uses = [computer("mouse_move", {"coordinate": [321, 234]}), computer("wait", {"duration": 2})]

            def on_event(e):
                if e["phase"] == "started":
                    started.append(e["tool_use_id"])
                if e["name"] == "wait" and e["phase"] == "started" and proxy.accepted == 1:
                    proxy.cut()  # once: a client that ran the batch again must not be cut again

            run_ = await client.run_batch(uses, batch_id="resume-1", on_tool_event=on_event)
            (info,) = await disconnected
            assert info["code"] == 1006
            (welcome,) = await reconnected
            assert welcome["session_id"] == session and welcome["resumed"] is True
            assert client.session_id == session
            assert proxy.accepted >= 2, "the client connected again"

            assert await moves() == moves_before + 1, "the daemon ran the mouse_move once"
            assert await replays() == replays_before + 1, "and answered the resend from its store"
            assert started == [uses[0]["id"], uses[1]["id"]], "each call started once"

            assert run_.result["batch_id"] == "resume-1"
            assert run_.result["replayed"] is True, "answered from the stored result"
            assert "is_error" not in run_.tool_results[0]
            # The drop stopped the batch as a cancel would: the wait got the cancelled text.
            assert run_.result["cancelled"] is True
            assert texts(run_.tool_results[1]) == [client.toolsets[0]["cancelled_text"]]
            where = await client.run_batch([computer("cursor_position")])
            assert texts(where.tool_results[0]) == ["X=321,Y=234"]

    run(go())


def test_an_idle_drop_reconnects_to_the_same_session_and_a_batch_made_meanwhile_runs_after_the_resume():
    async def go():
        async with Proxy(URL) as proxy, connect(proxy.url) as client:
            session = client.session_id
            disconnected = next_event(client, "disconnect")
            proxy.hold()
            proxy.cut()
            await disconnected
            assert client.state == "reconnecting"
            reconnected = next_event(client, "reconnect")
            task = asyncio.ensure_future(client.run_batch([computer("wait", {"duration": 0})]))
            await until(lambda: client.pending_batch_ids != [], "the batch to wait for the connection")
            proxy.release()
            (welcome,) = await reconnected
            assert welcome["resumed"] is True
            run_ = await task
            assert run_.result["replayed"] is False, "it was never sent before: it ran now"
            assert client.session_id == session

    run(go())


def test_a_lost_session_fails_the_batch_with_session_lost_and_never_runs_it_again():
    async def go():
        started = []
        async with Proxy(SHORT_GRACE_URL) as proxy, connect(proxy.url) as client:
            old_session = client.session_id
            wait = computer("wait", {"duration": 30})

            def on_event(e):
                if e["phase"] == "started":
                    started.append(e["tool_use_id"])
                    if e["tool_use_id"] == wait["id"]:
                        proxy.hold()
                        proxy.cut()

            lost = next_event(client, "session_lost")
            task = asyncio.ensure_future(client.run_batch([wait], on_tool_event=on_event))
            await until(lambda: proxy.accepted >= 2, "a reconnect attempt")
            # The daemon ends the session 300 ms after the drop; the client is held back until then.
            # (/metrics shares the handshake rate limit: it is read every 100 ms, no faster.)
            while await metric(SHORT_GRACE_URL, "deskbatch_sessions") != 0:
                await asyncio.sleep(0.1)
            proxy.release()
            with pytest.raises(SessionLostError) as caught:
                await task
            err = caught.value
            assert (err.reason, err.sent, err.session_id, err.tool_use_ids) == (
                "session_lost",
                True,
                old_session,
                (wait["id"],),
            )
            assert err.code == "ERR_SESSION_LOST"
            assert "outcome of batch" in str(err) and "is unknown" in str(err)
            (info,) = await lost
            assert info["previous_session_id"] == old_session
            assert info["rejected_batch_ids"] == [err.batch_id]
            assert info["welcome"]["resumed"] is False
            assert client.session_id != old_session and client.state == "open"

            # Batches of one session run in arrival order: had the client sent the lost batch into the new
            # session, it would have run before this one, and its `started` event would be counted by now.
            nxt = computer("wait", {"duration": 0})
            await client.run_batch([nxt], on_tool_event=on_event)
            assert started == [wait["id"], nxt["id"]], "the lost batch ran once, in the old session only"

    run(go())


def test_when_reconnecting_fails_for_good_the_batch_fails_with_connection_lost():
    async def go():
        proxy = await Proxy(SHORT_GRACE_URL).__aenter__()
        client = await DeskbatchClient.connect(
            proxy.url, token=TOKEN, reconnect=ReconnectOptions(max_attempts=3, initial_delay=0.01, max_delay=0.02)
        )
        closed = next_event(client, "close")
        closing = []

        def on_event(e):
            if e["phase"] == "started" and not closing:
                closing.append(asyncio.ensure_future(proxy.close()))  # cuts and refuses every new connection

        with pytest.raises(ConnectionLostError) as caught:
            await client.run_batch([computer("wait", {"duration": 30})], on_tool_event=on_event)
        err = caught.value
        assert (err.reason, err.sent, err.code) == ("connection_lost", True, "ERR_CONNECTION_LOST")
        assert "could not reconnect" in str(err) and "is unknown" in str(err)
        await closed
        assert client.state == "closed"

    run(go())


def test_close_while_reconnecting_fails_the_batch_with_client_closed_and_stops_for_good():
    async def go():
        async with Proxy(SHORT_GRACE_URL) as proxy:
            client = await connect(proxy.url)
            cut = []

            def on_event(e):
                if e["phase"] == "started" and not cut:
                    cut.append(True)
                    proxy.hold()
                    proxy.cut()

            task = asyncio.ensure_future(client.run_batch([computer("wait", {"duration": 30})], on_tool_event=on_event))
            await until(lambda: proxy.accepted >= 2, "a reconnect attempt")
            assert client.state == "reconnecting"
            closed = next_event(client, "close")
            await client.close()
            await closed
            with pytest.raises(ClientClosedError) as caught:
                await task
            assert caught.value.sent is True and caught.value.code == "ERR_CLIENT_CLOSED"
            assert client.state == "closed"
            attempts = proxy.accepted
            proxy.release()
            # close() ended the reconnect attempt under way and its timers: the next connection is only the
            # probe's (the proxy counts connections in the order they arrive, and the probe's welcome comes
            # after its own was accepted).
            probe = await DeskbatchClient.connect(proxy.url, token=TOKEN, reconnect=False)
            await probe.close()
            assert proxy.accepted == attempts + 1, "no reconnect attempt after close() (the one more is the probe)"
            with pytest.raises(ClientClosedError, match="the client is closed"):
                await client.run_batch([computer("wait")])

    run(go())


def test_another_connection_resuming_the_session_takes_it_over_and_the_client_stops():
    async def go():
        client = await connect(SHORT_GRACE_URL)
        closed = next_event(client, "close")
        disconnected = next_event(client, "disconnect")
        started = asyncio.Event()
        task = asyncio.ensure_future(
            client.run_batch(
                [computer("wait", {"duration": 30})], on_tool_event=lambda e: e["phase"] == "started" and started.set()
            )
        )
        await started.wait()
        # A second connection (a bare socket here) resumes the client's session: the daemon closes the client's
        # socket with 4001, and the client does not fight for the session.
        other = await Socket.open(SHORT_GRACE_URL, TOKEN, open_timeout=10, heartbeat=None, max_message_bytes=None)
        try:
            await other.send(json.dumps({"type": "hello", "resume_session_id": client.session_id}))
            welcome = json.loads(await other.frames().__anext__())
            assert welcome["type"] == "welcome" and welcome["resumed"] is True
            (info,) = await disconnected
            assert info["code"] == 4001
            with pytest.raises(ConnectionLostError) as caught:
                await task
            assert (caught.value.reason, caught.value.sent) == ("session_taken", True)
            assert "another connection took over the session" in str(caught.value)
            await closed
            assert client.state == "closed"
        finally:
            await other.close()

    run(go())
