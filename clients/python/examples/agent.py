"""An agent that gives Claude a real desktop and browser through a deskbatch daemon, in Python.

It offers the toolsets the daemon serves, runs each assistant turn's computer and browser calls as one batch,
and sends the results back, until Claude stops asking for tools: the loop of examples/agent.ts, in the shape
the Anthropic Python SDK uses (``client.beta.messages.create`` with ``tools``, loop on ``tool_use``, answer
with ``tool_result``).

    python3 clients/python/examples/agent.py "Open example.com and tell me its title"
    npm run example:python     # no key: recorded turns from a stand-in Messages API, real calls on your daemon

The Messages API is reached through the ``anthropic`` package when it is installed (``AsyncAnthropic``, which
reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL); without it, through ``MessagesHttpClient`` below, a few lines
of standard-library HTTP with the same ``beta.messages.create`` call, so the example runs where only
``websockets`` is installed.

Flags: --url, --token, --model, --max-turns, --max-tokens. Environment: ANTHROPIC_API_KEY (required for the
real API), ANTHROPIC_BASE_URL (another endpoint), DESKBATCH_URL, DESKBATCH_TOKEN (else ~/.deskbatch/token),
ANTHROPIC_MODEL. Exit status: 0 finished, 1 error, 2 usage, 3 max turns reached.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

if importlib.util.find_spec("deskbatch") is None:  # run from the repository without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from deskbatch import DeskbatchClient, RunBatchResult, merge_tool_results

try:
    import anthropic
except ImportError:
    anthropic = None

#: A current Claude model that supports computer_toolset_20260801 and browser_toolset_20260801.
DEFAULT_MODEL = "claude-opus-5-5"
DEFAULT_URL = "ws://127.0.0.1:8765/v1"
DEFAULT_MAX_TURNS = 25
DEFAULT_MAX_TOKENS = 4096

SYSTEM = " ".join(
    [
        "You operate a Linux desktop and a Chromium browser through the computer and browser toolsets.",
        "Prefer the browser toolset for web pages. Several actions in one turn run in order; after a failure,",
        "the rest of that toolset's actions in the turn are skipped, so look at the result before retrying.",
    ]
)


# ---------------------------------------------------------------- the Messages API without the SDK


@dataclass
class Message:
    """The fields of a Messages API response the loop reads (the SDK's ``BetaMessage`` has the same names)."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    raw: dict[str, Any] = field(default_factory=dict)


class MessagesHttpClient:
    """``client.beta.messages.create(**params)`` over plain HTTP: POST /v1/messages, as the SDK sends it."""

    def __init__(self, api_key: str, base_url: str | None = None, timeout: float = 600.0) -> None:
        self._api_key = api_key
        self._base_url = (base_url or "https://api.anthropic.com").rstrip("/")
        self._timeout = timeout
        self.beta = self
        self.messages = self

    async def create(self, **params: Any) -> Message:
        body = await asyncio.get_running_loop().run_in_executor(None, self._post, params)
        return Message(content=body["content"], stop_reason=body.get("stop_reason"), raw=body)

    def _post(self, params: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self._base_url}/v1/messages",
            data=json.dumps(params).encode("utf-8"),
            method="POST",
            headers={
                "content-type": "application/json",
                "x-api-key": self._api_key,
                "anthropic-version": "2023-06-01",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", "replace")
            try:
                detail = json.loads(detail)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                pass
            raise RuntimeError(f"the Messages API answered {err.code}: {detail}") from None


# ---------------------------------------------------------------- the loop


@dataclass
class AgentResult:
    #: The text blocks of the last assistant turn.
    final_text: str
    #: Requests sent to the Messages API.
    turns: int
    stop_reason: str | None
    #: True when max_turns ran out while Claude still asked for tools.
    hit_max_turns: bool
    #: The whole conversation, for inspection.
    messages: list[dict[str, Any]]


def field_of(block: Any, name: str) -> Any:
    """A block's field: a dict's key (the HTTP client) or an SDK object's attribute."""
    return block.get(name) if isinstance(block, dict) else getattr(block, name, None)


def not_available(tool_use: Any) -> dict[str, Any]:
    """A tool_use this agent cannot run (a custom tool, a toolset the daemon does not serve) still gets a result:
    an error, with ``toolset_name`` echoed for a member call."""
    toolset = field_of(tool_use, "toolset_name")
    what = (
        f"the '{toolset}' toolset is not available here"
        if toolset
        else f"this agent has no tool named '{field_of(tool_use, 'name')}'"
    )
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": field_of(tool_use, "id")}
    if toolset:
        result["toolset_name"] = toolset
    result["is_error"] = True
    result["content"] = [{"type": "text", "text": f"Error: {what}."}]
    return result


def text_of(content: list[Any]) -> str:
    return "\n".join(field_of(b, "text") for b in content if field_of(b, "type") == "text").strip()


def describe_turn(turn: int, calls: list[Any], run: RunBatchResult | None, ms: float) -> str:
    """``turn 2: 3 calls (computer 3), 1 failed (mouse_move: ToolInputError), 1 not run, 412 ms``"""
    by_toolset: dict[str, int] = {}
    for call in calls:
        name = field_of(call, "toolset_name") or "-"
        by_toolset[name] = by_toolset.get(name, 0) + 1
    split = ", ".join(f"{name} {n}" for name, n in by_toolset.items())
    parts = [f"turn {turn}: {len(calls)} call{'' if len(calls) == 1 else 's'}{f' ({split})' if split else ''}"]
    failures = run.result["failures"] if run else []
    failed = ", ".join(f"{f['name']}: {f['error']['type']}" for f in failures)
    parts.append(f"{len(failures)} failed{f' ({failed})' if failed else ''}")
    failed_ids = {f["tool_use_id"] for f in failures}
    not_run = sum(
        1 for r in (run.tool_results if run else []) if r.get("is_error") and r["tool_use_id"] not in failed_ids
    )
    if not_run:
        parts.append(f"{not_run} not run")
    if run and run.result["cancelled"]:
        parts.append("cancelled")
    parts.append(f"{round(ms)} ms")
    return ", ".join(parts)


async def run_agent(
    client: Any,
    desk: DeskbatchClient,
    task: str,
    *,
    model: str = DEFAULT_MODEL,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    system: str = SYSTEM,
    log: Callable[[str], None] = lambda line: None,
) -> AgentResult:
    """Ask Claude, run the turn's deskbatch calls as one batch, answer every tool_use (results first, in order),
    repeat until Claude stops asking for tools or ``max_turns`` requests were sent. ``client`` is an
    ``anthropic.AsyncAnthropic`` or a ``MessagesHttpClient``."""
    # welcome's toolsets carry the ready tools[] entries: only the members this daemon serves are offered.
    tools = desk.tools
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    response = None
    turns = 0
    while turns < max_turns:
        turns += 1
        response = await client.beta.messages.create(
            model=model, max_tokens=max_tokens, system=system, tools=tools, messages=messages
        )
        messages.append({"role": "assistant", "content": response.content})
        split = desk.split_tool_uses(response.content)
        if response.stop_reason != "tool_use" or not (split.deskbatch or split.own):
            break
        started = time.perf_counter()
        run = await desk.run_batch(split.deskbatch) if split.deskbatch else None
        log(describe_turn(turns, [*split.deskbatch, *split.own], run, (time.perf_counter() - started) * 1000))
        results = run.tool_results if run else []
        messages.append(
            {
                "role": "user",
                "content": merge_tool_results(response.content, results, [not_available(t) for t in split.own]),
            }
        )
        if run and run.result["cancelled"]:
            break
    stop_reason = response.stop_reason if response is not None else None
    return AgentResult(
        final_text=text_of(response.content) if response is not None else "",
        turns=turns,
        stop_reason=stop_reason,
        hit_max_turns=stop_reason == "tool_use" and turns >= max_turns,
        messages=messages,
    )


# ---------------------------------------------------------------- command line


def read_token() -> str | None:
    try:
        return (Path.home() / ".deskbatch" / "token").read_text().strip() or None
    except OSError:
        return None


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return n


async def main(argv: list[str], env: dict[str, str]) -> int:
    parser = argparse.ArgumentParser(
        prog="agent.py",
        description="Claude on a deskbatch desktop. ANTHROPIC_API_KEY must be set (ANTHROPIC_BASE_URL points "
        "elsewhere). Exit status: 0 finished, 1 error, 2 usage, 3 max turns reached.",
    )
    parser.add_argument("task", nargs="+")
    parser.add_argument("--url", default=env.get("DESKBATCH_URL", DEFAULT_URL), help="deskbatch daemon")
    parser.add_argument("--token", default=env.get("DESKBATCH_TOKEN"), help="its token (default ~/.deskbatch/token)")
    parser.add_argument("--model", default=env.get("ANTHROPIC_MODEL", DEFAULT_MODEL))
    parser.add_argument("--max-turns", type=positive_int, default=DEFAULT_MAX_TURNS)
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    task = " ".join(args.task).strip()
    api_key, base_url = env.get("ANTHROPIC_API_KEY"), env.get("ANTHROPIC_BASE_URL")
    if not api_key and not base_url:
        print(
            "ANTHROPIC_API_KEY is not set: set it to run against the Claude API "
            "(or set ANTHROPIC_BASE_URL to point at another endpoint).",
            file=sys.stderr,
        )
        return 2
    token = args.token or read_token()
    if not token:
        print(
            "no deskbatch token: pass --token, set DESKBATCH_TOKEN, or run the daemon once to create "
            "~/.deskbatch/token",
            file=sys.stderr,
        )
        return 2
    # Without a key, a stand-in at ANTHROPIC_BASE_URL still gets a well-formed request.
    if anthropic is not None:
        client: Any = anthropic.AsyncAnthropic(api_key=api_key or "no-key", base_url=base_url)
        via = f"anthropic {anthropic.__version__}"
    else:
        client = MessagesHttpClient(api_key or "no-key", base_url)
        via = "plain HTTP (the anthropic package is not installed)"

    try:
        async with DeskbatchClient.connect(args.url, token=token, client_name="deskbatch-example-agent-py/1") as desk:
            offered = ", ".join(f"{t['toolset_name']} ({len(t['members'])} members)" for t in desk.toolsets)
            print(f"deskbatch {args.url}: session {desk.session_id}, offering {offered}; model {args.model}")
            print(f"Messages API through {via}", file=sys.stderr)
            result = await run_agent(
                client,
                desk,
                task,
                model=args.model,
                max_turns=args.max_turns,
                max_tokens=args.max_tokens,
                log=lambda line: print(line, flush=True),
            )
    except Exception as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"final ({result.stop_reason or 'no reply'} after {result.turns} turns): {result.final_text or '(no text)'}")
    if result.hit_max_turns:
        print(f"stopped after --max-turns {args.max_turns} with Claude still asking for tools", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(sys.argv[1:], dict(os.environ))))
    except KeyboardInterrupt:
        sys.exit(130)
