"""split_tool_uses and merge_tool_results on an assistant turn as the Messages API returns it (no daemon)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from deskbatch import ToolResultMismatchError, merge_tool_results, split_tool_uses


def text(t):
    return {"type": "text", "text": t, "citations": None}


def use(id, name, toolset_name, input=None):
    block = {"type": "tool_use", "id": id, "name": name, "input": input or {}, "caller": {"type": "direct"}}
    if toolset_name:
        block["toolset_name"] = toolset_name
    return block


#: Text, a server tool call, computer and browser members, a plain tool.
ASSISTANT = [
    text("Let me look."),
    use("toolu_a", "screenshot", "computer"),
    use("toolu_b", "lookup_order", None, {"order": 7}),
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
    use("toolu_c", "navigate", "browser", {"url": "https://example.com"}),
    use("toolu_d", "left_click", "computer", {"coordinate": [1, 2]}),
]


def own(id):
    return {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": f"own {id}"}]}


def ids(blocks):
    return [b["tool_use_id"] if b["type"] == "tool_result" else b["type"] for b in blocks]


def test_split_keeps_order_and_sends_only_served_toolsets_to_deskbatch():
    both = split_tool_uses(ASSISTANT, ["computer", "browser"])
    assert [b["id"] for b in both.deskbatch] == ["toolu_a", "toolu_c", "toolu_d"]
    assert [b["id"] for b in both.own] == ["toolu_b"]
    assert both.deskbatch[0] is ASSISTANT[1], "the blocks themselves, unchanged"
    computer_only = split_tool_uses(ASSISTANT, ["computer"])
    assert [b["id"] for b in computer_only.deskbatch] == ["toolu_a", "toolu_d"]
    assert [b["id"] for b in computer_only.own] == ["toolu_b", "toolu_c"], "a toolset not served stays with the caller"


def test_split_sends_the_older_computer_tool_to_deskbatch_only_when_asked():
    turn = [
        use("toolu_l", "computer", None, {"action": "screenshot"}),
        use("toolu_n", "navigate", "browser", {"url": "https://example.com"}),
        use("toolu_o", "lookup_order", None, {"order": 7}),
    ]
    assert [b["id"] for b in split_tool_uses(turn, ["browser"]).own] == ["toolu_l", "toolu_o"]
    split = split_tool_uses(turn, ["browser"], legacy_computer=True)
    assert [b["id"] for b in split.deskbatch] == ["toolu_l", "toolu_n"]
    assert [b["id"] for b in split.own] == ["toolu_o"]


def test_split_reads_sdk_block_objects_by_attribute():
    sdk_blocks = [SimpleNamespace(**b) for b in ASSISTANT if b["type"] != "server_tool_use"]
    split = split_tool_uses(sdk_blocks, ["computer"])
    assert [b.id for b in split.deskbatch] == ["toolu_a", "toolu_d"]
    assert [b.id for b in split.own] == ["toolu_b", "toolu_c"]


def test_merge_puts_one_result_per_tool_use_first_in_tool_use_order_then_extra():
    deskbatch = [own(i) for i in ("toolu_d", "toolu_a", "toolu_c")]
    note = {"type": "text", "text": "Also: hurry."}
    merged = merge_tool_results(ASSISTANT, deskbatch, [own("toolu_b")], [note])
    assert ids(merged) == ["toolu_a", "toolu_b", "toolu_c", "toolu_d", "text"]
    assert merged[0] is deskbatch[1], "results go in unchanged"


@pytest.mark.parametrize(
    "problem, tool_use_id, make",
    [
        ("missing", "toolu_a", lambda all: merge_tool_results(ASSISTANT, all[1:])),
        ("duplicate", "toolu_c", lambda all: merge_tool_results(ASSISTANT, all, [own("toolu_c")])),
        ("unknown", "toolu_zz", lambda all: merge_tool_results(ASSISTANT, [*all, own("toolu_zz")])),
        ("misplaced", "toolu_a", lambda all: merge_tool_results(ASSISTANT, all[1:], [], [own("toolu_a")])),
        (
            "duplicate_tool_use",
            "toolu_a",
            lambda all: merge_tool_results([*ASSISTANT, use("toolu_a", "zoom", "computer")], all),
        ),
    ],
)
def test_merge_refuses_what_the_api_would_refuse(problem, tool_use_id, make):
    all_results = [own(i) for i in ("toolu_a", "toolu_b", "toolu_c", "toolu_d")]
    with pytest.raises(ToolResultMismatchError) as caught:
        make(all_results)
    assert caught.value.problem == problem
    assert caught.value.tool_use_id == tool_use_id
    assert caught.value.code == "ERR_TOOL_RESULT_MISMATCH"
