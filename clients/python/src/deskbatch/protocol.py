"""The wire messages of deskbatch protocol v1 (docs/PROTOCOL.md), as TypedDicts.

They mirror the zod schemas of the TypeScript side (src/base/protocol.ts): the
messages are the JSON objects the daemon sends, unchanged, so a `ToolResult`
goes into the next Messages API request as it is. Keys the daemon sends only
when a `hello` option asked for them sit in the `total=False` part of each type.
"""

from __future__ import annotations

# Optional and Union, not `X | None`: typing.get_type_hints() evaluates these annotations, and Python 3.9 has no `|`.

from typing import Any, Literal, Optional, TypedDict, Union

PROTOCOL_VERSION = "deskbatch.v1"
PROTOCOL_PATH = "/v1"
#: The close code of a connection whose session another connection resumed.
CLOSE_SESSION_RESUMED = 4001

#: The `type` of the `tools[]` entries deskbatch serves (`welcome.toolsets[].tool`).
TOOLSET_TYPES = ("computer_toolset_20260801", "browser_toolset_20260801")

ToolEventPhase = Literal["started", "succeeded", "failed", "not_executed", "cancelled"]


class _ToolUseBlockBase(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Any


class ToolUseBlock(_ToolUseBlockBase, total=False):
    """A `tool_use` block exactly as the Messages API returned it."""

    #: Set on toolset member calls (`computer`, `browser`); absent or None for plain tools.
    toolset_name: Optional[str]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ImageSource(TypedDict):
    type: Literal["base64"]
    media_type: Literal["image/png", "image/jpeg", "image/webp", "image/gif"]
    #: The image's bytes, base64.
    data: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: ImageSource


class _BrowserStateBlockBase(TypedDict):
    type: Literal["browser_state"]
    #: `{"tab_id", "title", "url", "active"?}` per tab (docs/TOOLSETS.md).
    tabs: list[dict[str, Any]]


class BrowserStateBlock(_BrowserStateBlockBase, total=False):
    state_changes: list[dict[str, Any]]


ResultBlock = Union[TextBlock, ImageBlock, BrowserStateBlock]


class _ToolResultBase(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: list[ResultBlock]


class ToolResult(_ToolResultBase, total=False):
    """A `tool_result` block: put it, unchanged, first in the next user message."""

    #: Echoed from the tool_use on member results, and only there.
    toolset_name: str
    is_error: Literal[True]


class _ErrorInfoBase(TypedDict):
    #: The error's type name (what the model is told by default).
    type: str
    #: The full message, for the operator.
    message: str
    timed_out: bool
    retryable: bool


class ErrorInfo(_ErrorInfoBase, total=False):
    repeated: int
    attempts: int
    retry_after_ms: int


class _ToolEventBase(TypedDict):
    type: Literal["tool_event"]
    batch_id: str
    index: int
    tool_use_id: str
    toolset_name: Optional[str]
    name: str
    phase: ToolEventPhase


class ToolEvent(_ToolEventBase, total=False):
    duration_ms: float
    attempts: int
    #: On `failed` only.
    error: ErrorInfo


class Failure(TypedDict):
    tool_use_id: str
    index: int
    name: str
    error: ErrorInfo


class ScreenshotFile(TypedDict):
    tool_use_id: str
    #: Relative to the daemon's screenshots directory, `/`-separated.
    path: str
    width: int
    height: int
    bytes: int


class BatchResult(TypedDict):
    type: Literal["batch_result"]
    batch_id: str
    #: One per tool_use, in order.
    tool_results: list[ToolResult]
    failures: list[Failure]
    #: Toolset name -> index of the call whose failure halted it.
    halted: dict[str, int]
    cancelled: bool
    #: True when the daemon answered from its stored result (nothing ran again).
    replayed: bool
    duration_ms: float
    screenshots: list[ScreenshotFile]


class _ToolsetToolBase(TypedDict):
    type: str


class ToolsetTool(_ToolsetToolBase, total=False):
    """A `tools[]` entry for the Messages API, as `welcome` carries it."""

    configs: dict[str, dict[str, bool]]


class ToolsetInfo(TypedDict):
    type: str
    toolset_name: str
    members: list[str]
    not_executed_text: str
    cancelled_text: str
    tool: ToolsetTool


class Size(TypedDict):
    width: int
    height: int


class _WelcomeLimitsBase(TypedDict):
    max_tool_uses: int
    max_payload_bytes: int
    max_queued_batches: int


class WelcomeLimits(_WelcomeLimitsBase, total=False):
    max_batch_ms: int
    max_buffered_bytes: int
    result_cache_bytes: int
    result_cache_total_bytes: int
    resume_window_ms: int


class _WelcomeDesktopBase(TypedDict):
    mode: Literal["pool", "shared"]
    id: str


class WelcomeDesktop(_WelcomeDesktopBase, total=False):
    display: Size


class WelcomeProfile(TypedDict):
    name: str
    mode: Literal["read_write", "read_only"]
    bytes: int
    existed: bool


class _WelcomeBase(TypedDict):
    type: Literal["welcome"]
    protocol: str
    session_id: str
    #: True when `hello.resume_session_id` reattached an existing session.
    resumed: bool
    toolsets: list[ToolsetInfo]
    limits: WelcomeLimits


class Welcome(_WelcomeBase, total=False):
    #: Absent while the daemon's display is unreachable.
    display: Size
    screenshot: Size
    #: Only with `legacy_tools=True`: the older computer tools' `tools[]` entries, by type.
    legacy_tools: dict[str, dict[str, Any]]
    #: Only with `desktop=`.
    desktop: WelcomeDesktop
    recording: bool
    #: Only with `takeover=`: holds `help` when the operator allows takeover.
    capabilities: list[str]
    #: Only with `profile=`.
    profile: WelcomeProfile


class _ErrorMessageBase(TypedDict):
    type: Literal["error"]
    #: The daemon's error code (docs/PROTOCOL.md "error").
    code: str
    message: str


class ErrorMessage(_ErrorMessageBase, total=False):
    batch_id: str
    retry_after_ms: int


class DesktopWait(TypedDict):
    type: Literal["desktop_wait"]
    #: 1 = next.
    position: int
    waiting: int


class TakeoverActivity(TypedDict):
    duration_ms: int
    clicks: int
    typed_characters: int
    keys: int
    pasted_characters: int


class _TakeoverMessageBase(TypedDict):
    type: Literal["takeover"]
    event: Literal["help_requested", "started", "ended"]


class TakeoverMessage(_TakeoverMessageBase, total=False):
    request_id: str
    operator: str
    outcome: Literal["resolved", "unresolved", "expired", "disconnected", "ended"]
    note: str
    summary: str
    activity: TakeoverActivity


class DesktopRequest(TypedDict, total=False):
    """`hello.desktop`: what a new session wants of its desktop."""

    when_busy: Literal["wait", "refuse"]
    display: Size


class TakeoverRequest(TypedDict, total=False):
    """`hello.takeover`: what this connection's batches do while a person holds the desktop."""

    when_held: Literal["wait", "refuse"]


class ProfileRequest(TypedDict):
    """`hello.profile`: the named browser profile the session's browser starts with."""

    name: str
    mode: Literal["read_write", "read_only"]


#: One entry of the `tools[]` list the agent sends to the Messages API (`hello.tools`).
AgentToolEntry = dict[str, Any]
