"""Batches on a real display: results ready for the Messages API, halting, events, replay, refusals, cancel."""

from __future__ import annotations

import asyncio
import base64
import struct

import pytest
from deskbatch import (
    BatchRefusedError,
    DeskbatchClient,
    DeskbatchError,
    merge_tool_results,
)

from support import COMPUTER_NOT_EXECUTED, TOKEN, URL, computer, metric, run, texts, tool_use


def png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "a PNG"
    return struct.unpack(">II", data[16:24])


def test_a_screenshot_comes_back_as_a_base64_image_block_of_the_screenshot_size():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            shot = computer("screenshot")
            run_ = await client.run_batch([shot])
            (result,) = run_.tool_results
            assert result["tool_use_id"] == shot["id"]
            assert result["toolset_name"] == "computer"
            assert "is_error" not in result
            (image,) = result["content"]
            assert image["type"] == "image"
            assert image["source"]["type"] == "base64"
            assert image["source"]["media_type"] == "image/png"
            assert png_size(base64.b64decode(image["source"]["data"], validate=True)) == (1024, 768)
            (file,) = run_.result["screenshots"]
            assert (file["tool_use_id"], file["width"], file["height"]) == (shot["id"], 1024, 768)
            assert run_.result["replayed"] is False and run_.result["cancelled"] is False

    run(go())


def test_a_failing_call_halts_its_toolset_later_calls_get_the_exact_not_executed_text():
    async def go():
        events = []
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            uses = [
                computer("mouse_move", {"coordinate": [10, 20]}),
                computer("mouse_move", {"coordinate": [99999, 10]}),
                computer("cursor_position"),
                computer("screenshot"),
            ]
            run_ = await client.run_batch(uses, on_tool_event=events.append)
            results = run_.tool_results
            assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
            assert [r["toolset_name"] for r in results] == ["computer"] * 4, "toolset_name echoed on every result"
            assert "is_error" not in results[0]
            assert results[1]["is_error"] is True
            assert texts(results[1])[0].startswith("coordinate [99999, 10] is outside the screenshot")
            for halted in results[2:]:
                assert halted["is_error"] is True
                assert halted["content"] == [{"type": "text", "text": COMPUTER_NOT_EXECUTED}]
            assert client.toolsets[0]["not_executed_text"] == COMPUTER_NOT_EXECUTED
            (failure,) = run_.result["failures"]
            assert (failure["tool_use_id"], failure["index"], failure["name"]) == (uses[1]["id"], 1, "mouse_move")
            assert failure["error"]["type"] == "ToolInputError"
            assert run_.result["halted"] == {"computer": 1}
        assert [(e["index"], e["phase"]) for e in events] == [
            (0, "started"),
            (0, "succeeded"),
            (1, "started"),
            (1, "failed"),
            (2, "not_executed"),
            (3, "not_executed"),
        ]
        assert events[3]["error"] == failure["error"]

    run(go())


def test_every_hook_sees_the_same_events_in_order():
    async def go():
        from_option, from_on, from_batch = [], [], []
        async with DeskbatchClient.connect(URL, token=TOKEN, on_tool_event=from_option.append) as client:
            client.on("tool_event", from_on.append)
            removed = []
            remove = client.on("tool_event", removed.append)
            remove()
            uses = [computer("wait", {"duration": 0}), computer("cursor_position")]
            run_ = await client.run_batch(uses, batch_id="events-1", on_tool_event=from_batch.append)
            assert [f"{e['name']}:{e['phase']}" for e in from_batch] == [
                "wait:started",
                "wait:succeeded",
                "cursor_position:started",
                "cursor_position:succeeded",
            ]
            assert all(e["batch_id"] == "events-1" == run_.result["batch_id"] for e in from_batch)
            assert [e["tool_use_id"] for e in from_batch] == [u["id"] for u in uses for _ in (0, 1)]
            assert all(e["toolset_name"] == "computer" for e in from_batch)
            assert all(e["duration_ms"] >= 0 for e in from_batch if e["phase"] == "succeeded")
            assert from_option == from_batch and from_on == from_batch
            assert removed == []

    run(go())


def test_a_listener_that_raises_does_not_lose_the_result():
    async def go():
        reported = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))

        def broken(event):
            raise RuntimeError("listener bug")

        async with DeskbatchClient.connect(URL, token=TOKEN, on_tool_event=broken) as client:
            run_ = await client.run_batch([computer("cursor_position")])
            assert len(run_.tool_results) == 1
        assert reported and all(str(c["exception"]) == "listener bug" for c in reported)

    run(go())


def test_a_batch_id_sent_again_is_answered_from_the_store_and_refusals_are_typed():
    async def go():
        started = []
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            uses = [computer("mouse_move", {"coordinate": [5, 6]})]
            count = lambda e: e["phase"] == "started" and started.append(e["tool_use_id"])
            first = await client.run_batch(uses, batch_id="turn-1", on_tool_event=count)
            again = await client.run_batch(uses, batch_id="turn-1", on_tool_event=count)
            assert first.result["replayed"] is False and again.result["replayed"] is True
            assert again.tool_results == first.tool_results
            assert started == [uses[0]["id"]], "the replay ran nothing"

            async def refused(code, *args, **kwargs):
                with pytest.raises(BatchRefusedError) as caught:
                    await client.run_batch(*args, **kwargs)
                assert caught.value.code == code and caught.value.batch_id
                assert isinstance(caught.value, DeskbatchError)
                return caught.value

            dup = [computer("wait", {"duration": 0}, "toolu_dup"), computer("key", {"text": "a"}, "toolu_dup")]
            await refused("duplicate_tool_use_id", dup, batch_id="turn-2")
            await refused("batch_id_conflict", [computer("wait", {"duration": 1})], batch_id="turn-1")
            bad_id = [tool_use("computer", "cursor_position", id="not an id!")]
            err = await refused("invalid_message", bad_id, batch_id="turn-3")
            assert "tool_uses.0.id" in str(err)
            too_many = [computer("wait") for _ in range(client.welcome["limits"]["max_tool_uses"] + 1)]
            err = await refused("batch_too_large", too_many)
            assert "per batch" in str(err)
            with pytest.raises(ValueError, match=r'invalid batch_id "no spaces": 1–128 of \[A-Za-z0-9._:-\]'):
                await client.run_batch(uses, batch_id="no spaces")
            with pytest.raises(ValueError, match="run_batch needs at least one tool_use"):
                await client.run_batch([])
            with pytest.raises(ValueError, match="not a tool_use block"):
                await client.run_batch([{"type": "text", "text": "hi"}])
            assert client.pending_batch_ids == []

    run(go())


def test_cancel_stops_the_batch_and_returns_the_daemons_cancelled_result():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            phases = []
            uses = [computer("wait", {"duration": 300}), computer("cursor_position")]

            def on_event(e):
                phases.append(f"{e['name']}:{e['phase']}")
                if e["name"] == "wait" and e["phase"] == "started":
                    assert client.cancel("cancel-1") is True

            run_ = await client.run_batch(uses, batch_id="cancel-1", on_tool_event=on_event)
            assert run_.result["cancelled"] is True
            assert run_.result["failures"] == []
            cancelled = client.toolsets[0]["cancelled_text"]
            for r in run_.tool_results:
                assert r["is_error"] is True and r["content"] == [{"type": "text", "text": cancelled}]
            assert phases == ["wait:started", "wait:cancelled", "cursor_position:cancelled"]
            assert client.cancel("cancel-1") is False, "nothing waits any more"

    run(go())


def test_cancelling_the_awaiting_task_cancels_the_batch_at_the_daemon():
    async def go():
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            before = await metric(URL, "deskbatch_calls_total", member="wait", outcome="cancelled")
            started = asyncio.Event()
            task = asyncio.ensure_future(
                client.run_batch(
                    [computer("wait", {"duration": 300})],
                    on_tool_event=lambda e: e["phase"] == "started" and started.set(),
                )
            )
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert client.pending_batch_ids == []
            # The daemon cancels the 300 s wait (a later batch of the session would wait behind it otherwise).
            run_ = await client.run_batch([computer("cursor_position")])
            assert "is_error" not in run_.tool_results[0]
            after = await metric(URL, "deskbatch_calls_total", member="wait", outcome="cancelled")
            assert after == before + 1

    run(go())


def test_a_whole_turn_split_run_and_merged_with_the_callers_own_results():
    async def go():
        assistant = [
            {"type": "text", "text": "Let me look.", "citations": None},
            computer("cursor_position", id="toolu_w1"),
            tool_use(None, "lookup_order", {"order": 7}, id="toolu_w2"),
            tool_use("calendar", "read", {}, id="toolu_w3"),
            computer("wait", {"duration": 0}, id="toolu_w4"),
        ]
        async with DeskbatchClient.connect(URL, token=TOKEN) as client:
            split = client.split_tool_uses(assistant)
            assert [b["id"] for b in split.own] == ["toolu_w2", "toolu_w3"]
            run_ = await client.run_batch(split.deskbatch)
            mine = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": [{"type": "text", "text": "own"}]}
                for b in split.own
            ]
            content = merge_tool_results(assistant, run_.tool_results, mine)
            assert [b["tool_use_id"] for b in content] == ["toolu_w1", "toolu_w2", "toolu_w3", "toolu_w4"]
            assert content[0] is run_.tool_results[0], "deskbatch results go in unchanged"

    run(go())
