"""Splitting an assistant message into the calls deskbatch runs and the caller's own tool calls, and merging
both sets of results into the next user message: every ``tool_result`` first, in the order of the ``tool_use``
blocks, exactly one per ``tool_use``, then any other content (src/client/content.ts in Python).

Blocks may be plain dicts (the JSON of the Messages API) or the Anthropic SDK's block objects: fields are read
by key or by attribute, and the blocks themselves are passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import ToolResultMismatchError

#: The name of the older computer tools' one client tool (``computer_20250124``, ``computer_20251124``).
LEGACY_COMPUTER_TOOL = "computer"

B = TypeVar("B")


def block_field(block: Any, name: str, default: Any = None) -> Any:
    """A block's field: a dict's key, or an SDK object's attribute."""
    if isinstance(block, dict):
        return block.get(name, default)
    return getattr(block, name, default)


@dataclass
class SplitToolUses(Generic[B]):
    #: Calls of a toolset deskbatch serves: pass them to ``run_batch``.
    deskbatch: list[B] = field(default_factory=list)
    #: Every other ``tool_use``: the caller's own tools (and toolsets deskbatch does not serve).
    own: list[B] = field(default_factory=list)


def split_tool_uses(
    assistant_content: Iterable[B],
    served_toolsets: Iterable[str],
    *,
    legacy_computer: bool = False,
) -> SplitToolUses[B]:
    """Splits an assistant message's content.

    ``tool_use`` blocks whose ``toolset_name`` is one of ``served_toolsets`` (from ``welcome``) go to deskbatch,
    every other ``tool_use`` is the caller's own (with ``legacy_computer``, calls of the older ``computer`` tool
    go to deskbatch too). Order is kept within each list; blocks that are not ``tool_use`` are left out.
    """
    served = set(served_toolsets)
    out: SplitToolUses[B] = SplitToolUses()
    for block in assistant_content:
        if block_field(block, "type") != "tool_use":
            continue
        toolset = block_field(block, "toolset_name")
        if isinstance(toolset, str):
            ours = toolset in served
        else:
            ours = legacy_computer and block_field(block, "name") == LEGACY_COMPUTER_TOOL
        (out.deskbatch if ours else out.own).append(block)
    return out


def merge_tool_results(
    assistant_content: Iterable[Any],
    deskbatch_results: Sequence[Any],
    own_results: Sequence[Any] = (),
    extra: Sequence[Any] = (),
) -> list[Any]:
    """The next user message's content.

    One ``tool_result`` per ``tool_use`` of ``assistant_content``, in the ``tool_use`` order (from
    ``deskbatch_results`` and ``own_results``, whichever holds it), then ``extra`` (text, images). Raises
    ``ToolResultMismatchError`` when a ``tool_use`` has no result or two, when a result answers no ``tool_use``,
    or when ``extra`` holds a ``tool_result``.
    """
    for block in extra:
        if block_field(block, "type") == "tool_result":
            tool_use_id = str(block_field(block, "tool_use_id", ""))
            raise ToolResultMismatchError(
                "misplaced",
                tool_use_id,
                f"tool_result {tool_use_id} was passed as extra content; pass it in the results so it comes first",
            )
    order: list[str] = []
    asked = set()
    for block in assistant_content:
        if block_field(block, "type") != "tool_use":
            continue
        tool_use_id = block_field(block, "id")
        if tool_use_id in asked:
            raise ToolResultMismatchError(
                "duplicate_tool_use", tool_use_id, f"the assistant message has two tool_use blocks {tool_use_id}"
            )
        asked.add(tool_use_id)
        order.append(tool_use_id)
    by_id = {}
    for result in [*deskbatch_results, *own_results]:
        tool_use_id = block_field(result, "tool_use_id")
        if tool_use_id not in asked:
            raise ToolResultMismatchError(
                "unknown", str(tool_use_id), f"tool_result {tool_use_id} answers no tool_use of the assistant message"
            )
        if tool_use_id in by_id:
            raise ToolResultMismatchError(
                "duplicate", tool_use_id, f"tool_use {tool_use_id} has more than one tool_result"
            )
        by_id[tool_use_id] = result
    merged: list[Any] = []
    for tool_use_id in order:
        if tool_use_id not in by_id:
            raise ToolResultMismatchError("missing", tool_use_id, f"tool_use {tool_use_id} has no tool_result")
        merged.append(by_id[tool_use_id])
    merged.extend(extra)
    return merged
