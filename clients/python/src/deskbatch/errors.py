"""The client's typed errors, the TypeScript client's classes (src/client/errors.ts) in Python.

Each says what happened to the batch it is raised for: refused (nothing ran), or
outcome unknown (some calls may have run, and the client will not send it
again, so nothing is ever done twice). Each has a stable ``code``, as in
docs/PROTOCOL.md "The client library's errors": ``ERR_...`` for what the client
itself found, the daemon's own error code where the daemon answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal


class DeskbatchError(Exception):
    """Base class of every error this client raises."""

    #: ``ERR_...``, or the daemon's error code; None only for a ConnectError the daemon did not answer.
    code: str | None = "ERR_CLIENT"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_HANDSHAKE_HINTS: dict[int, str] = {
    401: " (missing or wrong token)",
    403: " (Origin not allowed)",
    404: " (wrong path: deskbatch listens on /v1)",
    429: " (too many handshakes from this address)",
    503: " (the daemon is full or shutting down)",
}


class HandshakeRefusedError(DeskbatchError):
    """The daemon refused the WebSocket handshake with an HTTP status (401 token, 403 origin, 404 path, 429, 503)."""

    code: str | None = "ERR_HANDSHAKE_REFUSED"

    def __init__(self, status: int) -> None:
        super().__init__(f"the daemon refused the connection with HTTP {status}{_HANDSHAKE_HINTS.get(status, '')}")
        self.status = status

    @property
    def permanent(self) -> bool:
        """Statuses that a retry cannot fix (a wrong token, origin or path)."""
        return self.status in (401, 403, 404)


class ConnectError(DeskbatchError):
    """The connection could not be opened or did not complete its hello (network error, timeout, daemon error)."""

    def __init__(self, message: str, code: str | None = None, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        #: The daemon's error code when it answered hello with one (``no_desktop``, ``invalid_message``, ...).
        self.code = code
        #: With ``no_desktop``: when the daemon expects a desktop to be free again.
        self.retry_after_ms = retry_after_ms


class BatchRefusedError(DeskbatchError):
    """The batch was not accepted (``batch_too_large``, ``queue_full``, ``desktop_held``, ...): nothing ran."""

    def __init__(self, code: str, message: str, batch_id: str, retry_after_ms: int | None = None) -> None:
        super().__init__(f"batch {batch_id} refused ({code}): {message}")
        self.code = code
        self.batch_id = batch_id
        #: ``desktop_held`` (a person holds the desktop): how long until sending it again is worth it.
        self.retry_after_ms = retry_after_ms


OutcomeUnknownReason = Literal["session_lost", "connection_lost", "session_taken", "closed"]


class BatchOutcomeUnknownError(DeskbatchError):
    """A batch ended without a ``batch_result``, so which of its calls ran is not known.

    When ``sent`` is False the batch never left this client and nothing ran. The
    client never sends such a batch again: ask the model to look (a screenshot)
    before acting again, and answer ``tool_use_ids`` yourself if you go on.
    """

    code: str | None = "ERR_BATCH_OUTCOME_UNKNOWN"

    def __init__(
        self,
        reason: OutcomeUnknownReason,
        message: str,
        batch_id: str,
        session_id: str | None,
        sent: bool,
        tool_use_ids: Sequence[str],
    ) -> None:
        super().__init__(message)
        self.reason: OutcomeUnknownReason = reason
        self.batch_id = batch_id
        #: The session the batch was sent in.
        self.session_id = session_id
        #: Whether the batch was ever sent (False: it certainly did not run).
        self.sent = sent
        self.tool_use_ids: tuple[str, ...] = tuple(tool_use_ids)


class SessionLostError(BatchOutcomeUnknownError):
    """The daemon no longer has the session the batch was sent in (it restarted, or the grace period ended)."""

    code: str | None = "ERR_SESSION_LOST"

    def __init__(
        self, batch_id: str, session_id: str | None, sent: bool, tool_use_ids: Sequence[str], why: str | None = None
    ) -> None:
        gone = f"the daemon no longer has session {session_id or '(none)'} (it restarted, or the grace period ended)"
        cause = why or gone
        outcome = (
            f"the outcome of batch {batch_id} is unknown, some of its calls may have run; it was not sent again"
            if sent
            else f"batch {batch_id} was not sent, nothing ran"
        )
        super().__init__(
            "session_lost",
            f"{cause}: {outcome}",
            batch_id,
            session_id,
            sent,
            tool_use_ids,
        )


class ConnectionLostError(BatchOutcomeUnknownError):
    """Reconnecting failed (attempts exhausted, the token refused) or another connection took the session over."""

    code: str | None = "ERR_CONNECTION_LOST"


class ClientClosedError(BatchOutcomeUnknownError):
    """``close()`` was called while the batch had no result yet."""

    code: str | None = "ERR_CLIENT_CLOSED"


ResultMismatchProblem = Literal["missing", "duplicate", "unknown", "duplicate_tool_use", "misplaced"]


class ToolResultMismatchError(DeskbatchError):
    """``merge_tool_results`` found a tool_use without exactly one tool_result, or a result for no tool_use."""

    code: str | None = "ERR_TOOL_RESULT_MISMATCH"

    def __init__(self, problem: ResultMismatchProblem, tool_use_id: str, message: str) -> None:
        super().__init__(message)
        self.problem: ResultMismatchProblem = problem
        self.tool_use_id = tool_use_id
