"""Connecting: the token, welcome and its tools, refusals as typed errors, and the hello options."""

from __future__ import annotations

import socket

import pytest
from deskbatch import (
    ConnectError,
    DeskbatchClient,
    DeskbatchError,
    HandshakeRefusedError,
)

from support import TOKEN, URL, browser, computer, run, texts, tool_use


def test_connect_gives_the_session_and_the_tools_ready_for_the_messages_api():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN, client_name="python-tests/1") as client:
            assert client.state == "open"
            assert client.session_id.startswith("s_")
            assert client.welcome["protocol"] == "deskbatch.v1"
            assert client.toolset_names == ["computer", "browser"]
            assert client.tools == [t["tool"] for t in client.welcome["toolsets"]]
            assert [t["type"] for t in client.tools] == ["computer_toolset_20260801", "browser_toolset_20260801"]
            client.tools[0]["configs"] = {}
            assert "configs" not in client.welcome["toolsets"][0]["tool"], "tools are copies"
            assert client.display == {"width": 1024, "height": 768}
            assert client.screenshot == {"width": 1024, "height": 768}
            assert "screenshot" in client.toolsets[0]["members"]
        assert client.state == "closed"

    run(go())


def test_a_bare_url_gets_the_protocol_path_and_await_works_as_well_as_async_with():
    async def go():
        bare = URL[: -len("/v1")]
        client = await DeskbatchClient.connect(bare, token=TOKEN)
        try:
            assert client.url == URL
        finally:
            await client.close()
            await client.close()  # idempotent

    run(go())


def test_a_wrong_token_is_refused_with_handshake_refused_401():
    async def go():
        with pytest.raises(HandshakeRefusedError) as caught:
            await DeskbatchClient.connect(URL, token="wrong-token-0123456789")
        err = caught.value
        assert err.status == 401
        assert err.permanent
        assert err.code == "ERR_HANDSHAKE_REFUSED"
        assert isinstance(err, DeskbatchError)
        assert "missing or wrong token" in str(err)
        assert "wrong-token" not in str(err), "the token is never in a message"

    run(go())


def test_a_wrong_path_is_refused_with_404():
    async def go():
        with pytest.raises(HandshakeRefusedError) as caught:
            await DeskbatchClient.connect(URL.replace("/v1", "/v2"), token=TOKEN)
        assert caught.value.status == 404
        assert "deskbatch listens on /v1" in str(caught.value)

    run(go())


def test_nothing_listening_is_a_connect_error_without_a_code():
    with socket.socket() as s:  # a port that was free a moment ago, and closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        with pytest.raises(ConnectError) as caught:
            await DeskbatchClient.connect(f"ws://127.0.0.1:{port}/v1", token=TOKEN, handshake_timeout=5)
        assert caught.value.code is None
        assert f"could not connect to ws://127.0.0.1:{port}/v1" in str(caught.value)

    run(go())


def test_a_hello_the_daemon_refuses_is_a_connect_error_with_its_code():
    async def go():
        with pytest.raises(ConnectError) as caught:
            await DeskbatchClient.connect(URL, token=TOKEN, desktop={"display": {"width": 333, "height": 222}})
        assert caught.value.code == "invalid_message"
        assert "cannot change size (it is 1024x768)" in str(caught.value)
        with pytest.raises(ConnectError) as caught:
            await DeskbatchClient.connect(URL, token=TOKEN, profile={"name": "shop", "mode": "read_only"})
        assert caught.value.code == "profile_unavailable"

    run(go())


def test_hello_events_false_sends_no_tool_events_only_the_result():
    async def go():
        seen = []
        async with DeskbatchClient.connect(URL, token=TOKEN, events=False, on_tool_event=seen.append) as client:
            client.on("tool_event", seen.append)
            uses = [computer("cursor_position"), computer("wait", {"duration": 0})]
            run_ = await client.run_batch(uses, on_tool_event=seen.append)
            assert [r["tool_use_id"] for r in run_.tool_results] == [u["id"] for u in uses]
            assert all("is_error" not in r for r in run_.tool_results)
        assert seen == []

    run(go())


def test_hello_legacy_tools_offers_the_older_computer_tool_and_runs_its_calls():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN, legacy_tools=True) as client:
            assert client.welcome["legacy_tools"]["computer_20251124"] == {
                "type": "computer_20251124",
                "name": "computer",
                "display_width_px": 1024,
                "display_height_px": 768,
                "enable_zoom": True,
            }
            turn = [
                tool_use(None, "computer", {"action": "mouse_move", "coordinate": [100, 200]}),
                tool_use(None, "computer", {"action": "cursor_position"}),
                tool_use(None, "lookup_order", {"order": 7}),
            ]
            split = client.split_tool_uses(turn)
            assert split.deskbatch == turn[:2] and split.own == turn[2:]
            run_ = await client.run_batch(split.deskbatch)
            assert texts(run_.tool_results[1]) == ["X=100,Y=200"]
            assert all("toolset_name" not in r for r in run_.tool_results), "the older tool's results carry none"
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            assert "legacy_tools" not in client.welcome

    run(go())


def test_hello_agent_tools_runs_only_what_the_model_was_offered():
    async def go():
        offered = [{"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": False}}}]
        async with DeskbatchClient.connect(URL, token=TOKEN, agent_tools=offered) as client:
            uses = [
                computer("zoom", {"region": [0, 0, 10, 10]}),
                computer("cursor_position"),
                browser("navigate", {"url": "https://example.com"}),
            ]
            results = (await client.run_batch(uses)).tool_results
            assert results[0]["is_error"] is True
            not_permitted = "The 'zoom' action is not permitted by this application's permissions"
            assert texts(results[0]) == [f"{not_permitted} and cannot be used in this session."]
            assert texts(results[1]) == ["Not executed: an earlier computer action in this turn failed."]
            assert texts(results[2]) == ["Error: Toolset 'browser' member 'navigate' not found"]
            assert results[2]["toolset_name"] == "browser"

    run(go())


def test_hello_desktop_and_takeover_ask_for_their_welcome_fields():
    async def go():
        async with DeskbatchClient.connect(
            URL, token=TOKEN, desktop={"when_busy": "refuse"}, takeover={"when_held": "refuse"}
        ) as client:
            assert client.welcome["desktop"] == {
                "mode": "shared",
                "id": "shared",
                "display": {"width": 1024, "height": 768},
            }
            assert client.welcome["capabilities"] == [], "this daemon was not started with --allow-takeover"
            with pytest.raises(DeskbatchError) as caught:
                await client.request_help("log in for me")
            assert "does not take help requests" in str(caught.value)
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            assert "desktop" not in client.welcome and "capabilities" not in client.welcome

    run(go())


def test_listeners_of_unknown_events_are_refused():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            with pytest.raises(ValueError, match="unknown event 'tool-event'"):
                client.on("tool-event", print)

    run(go())
