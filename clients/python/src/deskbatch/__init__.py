"""deskbatch: a Python client for the deskbatch daemon (docs/PROTOCOL.md), the TypeScript client's twin.

::

    from deskbatch import DeskbatchClient, merge_tool_results

    async with DeskbatchClient.connect("ws://127.0.0.1:8765/v1", token=token) as desk:
        response = await anthropic.beta.messages.create(..., tools=[*desk.tools, *my_tools])
        split = desk.split_tool_uses(response.content)
        run = await desk.run_batch(split.deskbatch)
        content = merge_tool_results(response.content, run.tool_results, await run_my_tools(split.own))

Reconnects resume the session and send waiting batches again under the same batch id, so the daemon answers
from its stored result: a dropped connection never causes a second click. The Anthropic SDK is not imported;
its blocks (or plain dicts) are accepted.
"""

from .client import EVENTS, DeskbatchClient, RunBatchResult
from .content import LEGACY_COMPUTER_TOOL, SplitToolUses, merge_tool_results, split_tool_uses
from .errors import (
    BatchOutcomeUnknownError,
    BatchRefusedError,
    ClientClosedError,
    ConnectError,
    ConnectionLostError,
    DeskbatchError,
    HandshakeRefusedError,
    OutcomeUnknownReason,
    SessionLostError,
    ToolResultMismatchError,
)
from .fleet import FleetPlacement, FleetPod, connect_fleet, pod_token
from .link import DEFAULT_RECONNECT, ClientState, ReconnectOptions
from .protocol import (
    PROTOCOL_VERSION,
    AgentToolEntry,
    BatchResult,
    DesktopRequest,
    DesktopWait,
    ErrorInfo,
    ErrorMessage,
    Failure,
    ImageBlock,
    ProfileRequest,
    ResultBlock,
    TakeoverMessage,
    TakeoverRequest,
    TextBlock,
    ToolEvent,
    ToolEventPhase,
    ToolResult,
    ToolsetInfo,
    ToolsetTool,
    ToolUseBlock,
    Welcome,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_RECONNECT",
    "EVENTS",
    "LEGACY_COMPUTER_TOOL",
    "PROTOCOL_VERSION",
    "AgentToolEntry",
    "BatchOutcomeUnknownError",
    "BatchRefusedError",
    "BatchResult",
    "ClientClosedError",
    "ClientState",
    "ConnectError",
    "ConnectionLostError",
    "DeskbatchClient",
    "DeskbatchError",
    "DesktopRequest",
    "DesktopWait",
    "ErrorInfo",
    "FleetPlacement",
    "FleetPod",
    "ErrorMessage",
    "Failure",
    "HandshakeRefusedError",
    "ImageBlock",
    "OutcomeUnknownReason",
    "ProfileRequest",
    "ReconnectOptions",
    "ResultBlock",
    "RunBatchResult",
    "SessionLostError",
    "SplitToolUses",
    "TakeoverMessage",
    "TakeoverRequest",
    "TextBlock",
    "ToolEvent",
    "ToolEventPhase",
    "ToolResult",
    "ToolResultMismatchError",
    "ToolUseBlock",
    "ToolsetInfo",
    "ToolsetTool",
    "Welcome",
    "connect_fleet",
    "merge_tool_results",
    "pod_token",
    "split_tool_uses",
]
