"""Placing a new session on a pod of a fleet (``connect_fleet``), the TypeScript client's ``connectFleet``
(src/client/fleet.ts) in Python, as docs/DEPLOY.md "Leasing desktops to agents" describes, from DNS alone.

- ``_<port>._tcp.desks.<domain>`` (every pod): its SRV targets are the pods' own names (``desk-1.desks.<domain>``);
- ``_<port>._tcp.desks-free.<domain>`` (only the Ready pods: a free desktop, not terminating): its targets carry
  no pod name, so its records are matched to ``desks``' by address and port.

The pods in both, lowest ordinal first, are each asked ``/readyz`` (by address; a bounded body) and connected to
with ``when_busy: "refuse"``; ``no_desktop``, ``too_many_sessions``, ``shutting_down``, 429, 503 and a network
failure pass to the next. When every pod connected to refused the token (401), that error is raised. When none had
room, the session waits on the pod with the fewest ``desktops.waiting`` less its ``desktops.free`` among those that
are full or listed with room (ordinal on a tie). The session is then pinned to its pod (link.py LinkTarget): every
reconnect resolves the pod's own name first; a name gone (NXDOMAIN), a token refused (401) or a session the pod no
longer has fails this and every later batch with SessionLostError, never a new session behind the caller's back.

Per-pod tokens (docs/DEPLOY.md "Per-pod tokens"): base64url(HMAC-SHA256(fleet key, "<pod name>/<pod uid>")), no
padding, the instance being what the pod's /readyz says, whose name part must be the pod's own DNS name.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import inspect
import json
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Optional, Union

from .client import DeskbatchClient
from .dns import DnsError, Resolver
from .errors import ConnectError, HandshakeRefusedError
from .link import ConnectOptions, Gone, LinkTarget, ReconnectOptions
from .protocol import PROTOCOL_PATH

#: deploy/k8s's names, the defaults: the per-pod Service, the Service of pods with room, their port's name.
FLEET_NAMES = {"pods": "desks", "free": "desks-free", "port_name": "ws"}
#: What deploy/k8s's init container requires of the key.
MIN_FLEET_KEY_LENGTH = 32
READYZ_TIMEOUT_S = 3.0
READYZ_MAX_BYTES = 64 * 1024
DEFAULT_PLACEMENT_TIMEOUT_S = 60.0
#: Between two looks at the fleet when no pod could take the session.
LOOK_AGAIN_S = (0.5, 1.0, 2.0, 5.0)
#: Refusals of a new session that another pod may not give (a wrong token, path or hello is not among them).
PASS_ON = ("too_many_sessions", "shutting_down")


@dataclass(frozen=True)
class FleetPod:
    """One pod of the fleet, as DNS and its /readyz tell it."""

    #: The first label of its own DNS name (``desk-1``).
    name: str
    #: Its own DNS name, an SRV target of ``desks``.
    host: str
    #: The address ``host`` resolved to when the pod was picked (resolved again on every reconnect), its port.
    address: str
    port: int
    #: What its /readyz says it is (``desk-1/<pod uid>``), when it says.
    instance: Optional[str] = None


@dataclass
class FleetPlacement:
    """Where connect_fleet placed a session (``client.placement``)."""

    pod: FleetPod
    #: No pod had room: the session waited in this pod's queue for a desktop.
    waited: bool
    #: The pods looked at before it, in order, and why each did not take the session: (pod name, why).
    passed: list[tuple[str, str]] = field(default_factory=list)


TokenSource = Union[str, Callable[[FleetPod], Union[str, Awaitable[str]]]]


def pod_token(fleet_key: str, instance: str) -> str:
    """base64url(HMAC-SHA256(fleet_key, instance)) without padding: a pod's token (docs/DEPLOY.md)."""
    digest = hmac.new(_checked_key(fleet_key).encode(), instance.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _checked_key(fleet_key: str) -> str:
    key = fleet_key.strip()
    if len(key) < MIN_FLEET_KEY_LENGTH:
        raise ValueError(f"the fleet key must hold at least {MIN_FLEET_KEY_LENGTH} characters")
    return key


async def connect_fleet(
    domain: str,
    *,
    fleet_key: Optional[str] = None,
    token: Optional[TokenSource] = None,
    services: Optional[dict[str, str]] = None,
    port_name: Optional[str] = None,
    dns_servers: Optional[list[str]] = None,
    placement_timeout: float = DEFAULT_PLACEMENT_TIMEOUT_S,
    reconnect: ReconnectOptions | bool = True,
    **connect: Any,
) -> DeskbatchClient:
    """Places a new session on a pod of the fleet in ``domain`` (``deskbatch.svc.cluster.local``) and returns its
    client, pinned to that pod (``client.placement`` says where and how).

    - ``fleet_key`` (the Secret ``deskbatch-fleet-key``) or ``token`` (one for every pod, or a function of a
      FleetPod, sync or async, that gives its token).
    - ``services``: ``{"pods": ..., "free": ...}``, default ``desks.<domain>`` and ``desks-free.<domain>``.
    - ``port_name``: the Services' port name whose SRV records are read (default ``ws``).
    - ``dns_servers``: ``host:port`` addresses to ask (default resolv.conf's).
    - ``placement_timeout``: seconds looking for a pod may take when every pod with room is draining or
      unreachable; a session queued on a pod waits as ``desktop`` and ``handshake_timeout`` say.
    - everything else is ``DeskbatchClient.connect``'s (``desktop={"when_busy": "refuse"}`` fails with ConnectError
      ``no_desktop`` when no pod has room, instead of waiting).
    """
    if (fleet_key is None) == (token is None):
        raise TypeError("connect_fleet needs either fleet_key or token")
    if fleet_key is not None:
        _checked_key(fleet_key)  # before any lookup
    if "token" in connect:
        raise TypeError("connect_fleet takes token=, not a connect option")
    port = port_name or FLEET_NAMES["port_name"]
    services = services or {}
    pods_name = f"_{port}._tcp.{services.get('pods') or FLEET_NAMES['pods'] + '.' + domain}"
    free_name = f"_{port}._tcp.{services.get('free') or FLEET_NAMES['free'] + '.' + domain}"
    dns = _FleetDns(dns_servers)
    deadline = time.monotonic() + placement_timeout
    desktop = dict(connect.pop("desktop", None) or {})
    when_busy = desktop.get("when_busy", "wait")

    async def token_for(pod: FleetPod) -> str:
        if isinstance(token, str):
            return token
        if token is not None:
            value = token(pod)
            return await value if inspect.isawaitable(value) else value  # type: ignore[no-any-return]
        if pod.instance is None:
            raise ConnectError(
                f"pod {pod.name}'s /readyz does not say its instance, so no token can be derived from the fleet key: "
                "start its daemon with --instance <pod name>/<pod uid> (deploy/k8s does), or give connect_fleet a token"
            )
        return pod_token(fleet_key or "", pod.instance)

    async def attempt(pod: FleetPod, busy: str, placement: FleetPlacement) -> DeskbatchClient:
        url = _ws_url(pod.address, pod.port)
        # connect() builds and checks the options (its keyword arguments); the client is then made pinned.
        options: ConnectOptions = DeskbatchClient.connect(
            url, token=await token_for(pod), reconnect=reconnect, desktop={**desktop, "when_busy": busy}, **connect
        )._options
        client = DeskbatchClient(url, options, _PinnedTarget(dns, pod))
        client.placement = placement
        return await client._open()

    look = 0
    while True:
        passed: list[tuple[str, str]] = []
        pods, free = await asyncio.gather(dns.pods(pods_name), dns.endpoints(free_name))
        if not pods:
            raise ConnectError(f"the fleet has no pod: {pods_name} has no SRV record")

        # 1. The pods with room, lowest ordinal first, each asked to refuse rather than queue.
        connected = 0
        refusal: Optional[HandshakeRefusedError] = None
        retry_after_ms: Optional[int] = None
        for listed in [p for p in pods if (p.address, p.port) in free]:
            ready = await _readiness(listed)
            pod = _named(listed, ready) if ready else listed
            if ready is None:
                why: Optional[str] = "no answer from /readyz"
            elif ready["status"] != "ready":
                why = ready.get("reason") or "not ready"
            else:
                why = _misnamed(pod)
            if why is not None:
                passed.append((pod.name, why))
                continue
            connected += 1
            try:
                return await attempt(pod, "refuse", FleetPlacement(pod, False, passed))
            except ConnectError as err:
                if err.code == "no_desktop":
                    if err.retry_after_ms is not None:
                        retry_after_ms = min(retry_after_ms or err.retry_after_ms, err.retry_after_ms)
                    passed.append((pod.name, "no_desktop"))
                elif err.code is None or err.code in PASS_ON:
                    passed.append((pod.name, err.code or err.message))  # full, stopping, or unreachable
                else:
                    raise
            except HandshakeRefusedError as err:
                if err.status == 401:
                    refusal = err
                    passed.append((pod.name, "token refused (401)"))
                elif not err.permanent:
                    passed.append((pod.name, err.message))
                else:
                    raise
        # Every pod connected to refused the token: a wrong key (or derivation), not a busy fleet.
        if refusal is not None and sum(1 for _, w in passed if w == "token refused (401)") == connected:
            raise refusal
        if when_busy == "refuse":
            why_none = f"no pod of the fleet has a free desktop ({_describe(passed)})"
            raise ConnectError(why_none, "no_desktop", retry_after_ms=retry_after_ms)

        # 2. None had room: wait on the pod with the fewest sessions waiting less the desktops it counts as free.
        loads = await asyncio.gather(*(_readiness(p) for p in pods))
        full = []
        for listed, ready in zip(pods, loads):
            if ready is None:
                continue
            pod = _named(listed, ready)
            busy = ready.get("reason") == "no_free_desktop" or (
                ready["status"] == "ready" and (pod.address, pod.port) in free
            )
            if busy and _misnamed(pod) is None:
                full.append((ready["desktops"]["waiting"] - ready["desktops"]["free"], _ordinal(pod), pod.name, pod))
        if full:
            least = min(full, key=lambda x: x[:3])[3]
            return await attempt(least, "wait", FleetPlacement(least, True, passed))

        # 3. Nothing to wait on (pods with room that are draining, or unreachable): look again shortly.
        if time.monotonic() >= deadline:
            raise ConnectError(f"no pod of the fleet could take the session ({_describe(passed)})", "no_desktop")
        await asyncio.sleep(LOOK_AGAIN_S[min(look, len(LOOK_AGAIN_S) - 1)])
        look += 1


class _PinnedTarget(LinkTarget):
    """Reconnects of a session placed on ``pod``: its own name, resolved anew; gone when the name is."""

    def __init__(self, dns: _FleetDns, pod: FleetPod) -> None:
        self.dns = dns
        self.pod = pod

    async def next(self) -> str | Gone:
        try:
            address = await self.dns.address(self.pod.host)
        except DnsError as err:
            raise ConnectError(f"cannot resolve {self.pod.host}: {err}") from err
        if address is None:
            return Gone(f"its pod {self.pod.name} is gone: {self.pod.host} no longer resolves")
        return _ws_url(address, self.pod.port)


def _named(pod: FleetPod, ready: dict[str, Any]) -> FleetPod:
    instance = ready.get("instance")
    return pod if instance is None else replace(pod, instance=instance)


def _misnamed(pod: FleetPod) -> Optional[str]:
    """Why a pod cannot be trusted with its token: its /readyz names another pod (the address moved on)."""
    if pod.instance is None or pod.instance.startswith(f"{pod.name}/"):
        return None
    return f"its /readyz names another pod ({pod.instance})"


def _describe(passed: list[tuple[str, str]]) -> str:
    return "; ".join(f"{p}: {w}" for p, w in passed) if passed else "no pod is listed with room"


def _ordinal(pod: FleetPod) -> int:
    m = re.search(r"-(\d+)$", pod.name)
    return int(m[1]) if m else 2**53


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _ws_url(address: str, port: int) -> str:
    return f"ws://{_host_port(address, port)}{PROTOCOL_PATH}"


async def _readiness(pod: FleetPod) -> Optional[dict[str, Any]]:
    """A pod's /readyz, by its address (its name would be answered 421); None when it gives no valid answer."""
    try:
        return _valid_readyz(await asyncio.wait_for(_get_readyz(pod), READYZ_TIMEOUT_S))
    except (OSError, asyncio.TimeoutError, ValueError):
        return None


async def _get_readyz(pod: FleetPod) -> bytes:
    reader, writer = await asyncio.open_connection(pod.address, pod.port)
    try:
        host = _host_port(pod.address, pod.port)
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("ascii"))
        await writer.drain()
        # The whole answer, at most the bound (headers included): a larger one is not a /readyz.
        data = await reader.read(READYZ_MAX_BYTES + 1)
        while data and len(data) <= READYZ_MAX_BYTES:
            more = await reader.read(READYZ_MAX_BYTES + 1 - len(data))
            if not more:
                break
            data += more
        if len(data) > READYZ_MAX_BYTES:
            raise ValueError("the /readyz answer is too large")
    finally:
        writer.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("no HTTP answer")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    return body


def _dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            raise ValueError("a cut chunked body")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2 :]


def _valid_readyz(body: bytes) -> Optional[dict[str, Any]]:
    """What a client reads of /readyz (docs/OPERATIONS.md), checked; None when it is not that."""
    data = json.loads(body.decode("utf-8"))
    if not isinstance(data, dict) or data.get("status") not in ("ready", "not_ready"):
        return None
    desktops = data.get("desktops")
    if not isinstance(desktops, dict):
        return None
    for k in ("free", "waiting"):
        v = desktops.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
    for k, limit in (("reason", 100), ("instance", 253)):
        v = data.get(k)
        if v is not None and (not isinstance(v, str) or len(v) > limit):
            return None
    return data


class _FleetDns:
    """The fleet's DNS: SRV records and addresses (dns.py), DNS failures raised as ConnectError."""

    def __init__(self, servers: Optional[list[str]]) -> None:
        self.resolver = Resolver(servers)

    async def pods(self, srv_name: str) -> list[FleetPod]:
        """The pods an SRV name lists, each with its address, lowest ordinal first."""
        pods = []
        for r in await self._srv(srv_name):
            address = await self._address_or_none(r.target)
            name = r.target.split(".")[0]
            if address is not None and name:
                pods.append(FleetPod(name, r.target, address, r.port))
        return sorted(pods, key=lambda p: (_ordinal(p), p.name))

    async def endpoints(self, srv_name: str) -> set[tuple[str, int]]:
        """The (address, port) of every endpoint an SRV name lists."""
        out = set()
        for r in await self._srv(srv_name):
            address = await self._address_or_none(r.target)
            if address is not None:
                out.add((address, r.port))
        return out

    async def _srv(self, name: str) -> list[Any]:
        try:
            return await self.resolver.srv(name)
        except DnsError as err:
            raise ConnectError(f"cannot read {name} from DNS: {err}") from err

    async def _address_or_none(self, host: str) -> Optional[str]:
        try:
            return await self.address(host)
        except DnsError:
            return None

    async def address(self, host: str) -> Optional[str]:
        """A name's IPv4 address; None when the name does not exist or has none. Raises DnsError on a failure."""
        addresses = await self.resolver.a(host)
        return addresses[0] if addresses else None
