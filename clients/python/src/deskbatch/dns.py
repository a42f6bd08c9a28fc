"""A small DNS client for connect_fleet (fleet.py): SRV and A queries over UDP, nothing else.

The standard library resolves addresses (``getaddrinfo``) but has no SRV lookup, and the client's one runtime
dependency is ``websockets``; so this asks DNS servers itself (RFC 1035), as Kubernetes' DNS answers a headless
Service's records. Bounded on every side: one query at a time per name, a random query id checked against the
answer (and the question echoed), a timeout per try and a number of tries per server, an answer read from one
datagram of at most ``MAX_ANSWER_BYTES`` (512 without EDNS; a truncated answer, TC set, is an error: there is no
TCP fallback, so a Service with more pods than one UDP answer holds is refused loudly, never read half), names
of at most 255 bytes and at most ``MAX_POINTERS`` compression pointers each, at most ``MAX_RECORDS`` records.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import Optional

TYPE_A = 1
TYPE_SRV = 33
CLASS_IN = 1
RCODE_NXDOMAIN = 3
#: The largest answer read: a plain DNS UDP message (no EDNS is asked for).
MAX_ANSWER_BYTES = 512
MAX_POINTERS = 16
MAX_RECORDS = 128
DEFAULT_TIMEOUT = 2.0
DEFAULT_TRIES = 2


class DnsError(Exception):
    """DNS gave no usable answer (no server answered, a server failure, a malformed or truncated answer)."""


@dataclass(frozen=True)
class Srv:
    """One SRV record: its target (lower case, no trailing dot) and port."""

    target: str
    port: int
    priority: int
    weight: int


@dataclass(frozen=True)
class _Answer:
    nxdomain: bool
    records: list[tuple[int, bytes, int]]  # (type, message, rdata offset) of the answers to the question's name


def parse_server(server: str) -> tuple[str, int]:
    """``127.0.0.1:5353``, ``[::1]:53``, ``10.0.0.10`` (port 53): an address, never a name to resolve."""
    host, port = server, 53
    if server.startswith("["):
        end = server.find("]")
        if end < 0:
            raise ValueError(f"bad DNS server {server!r}")
        host = server[1:end]
        if server[end + 1 :]:
            if not server[end + 1 :].startswith(":"):
                raise ValueError(f"bad DNS server {server!r}")
            port = int(server[end + 2 :])
    elif server.count(":") == 1:
        host, _, p = server.partition(":")
        port = int(p)
    ipaddress.ip_address(host)  # raises ValueError for a name
    if not 0 < port < 65536:
        raise ValueError(f"bad DNS server port in {server!r}")
    return host, port


def system_servers(path: str = "/etc/resolv.conf") -> list[str]:
    """The ``nameserver`` lines of resolv.conf (what a pod's resolver asks), or 127.0.0.1 when there are none."""
    servers = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f.read(64 * 1024).splitlines():
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "nameserver":
                    try:
                        host = fields[1].split("%")[0]
                        ipaddress.ip_address(host)
                    except ValueError:
                        continue
                    servers.append(f"[{host}]:53" if ":" in host else f"{host}:53")
    except OSError:
        pass
    return servers or ["127.0.0.1:53"]


class Resolver:
    """Asks ``servers`` in turn (each ``tries`` times, ``timeout`` seconds a try) for SRV and A records."""

    def __init__(
        self, servers: Optional[list[str]] = None, *, timeout: float = DEFAULT_TIMEOUT, tries: int = DEFAULT_TRIES
    ) -> None:
        self.servers = [parse_server(s) for s in (servers if servers is not None else system_servers())]
        if not self.servers:
            raise ValueError("no DNS server to ask")
        self.timeout = timeout
        self.tries = tries

    async def srv(self, name: str) -> list[Srv]:
        """The SRV records of ``name``; none when it does not exist or has none."""
        answer = await self._query(name, TYPE_SRV)
        out = []
        for _, msg, off in answer.records:
            priority, weight, port = struct.unpack_from("!HHH", msg, off)
            target, _ = read_name(msg, off + 6)
            out.append(Srv(target, port, priority, weight))
        return out

    async def a(self, name: str) -> Optional[list[str]]:
        """The IPv4 addresses of ``name``: None when the name does not exist (NXDOMAIN), [] when it has none."""
        answer = await self._query(name, TYPE_A)
        if answer.nxdomain:
            return None
        return [socket.inet_ntoa(msg[off : off + 4]) for _, msg, off in answer.records]

    async def _query(self, name: str, qtype: int) -> _Answer:
        last: Exception = DnsError("no server answered")
        for host, port in self.servers:
            for _ in range(self.tries):
                qid = secrets.randbelow(65536)
                query = build_query(qid, name, qtype)
                try:
                    data = await _exchange(host, port, query, qid, self.timeout)
                    return parse_answer(data, qid, name, qtype)
                except asyncio.TimeoutError:
                    last = DnsError(f"no answer from {host}:{port} for {name} within {self.timeout:g} s")
                except OSError as err:
                    last = DnsError(f"cannot ask {host}:{port} for {name}: {err}")
                except DnsError as err:
                    last = err
        raise last


def encode_name(name: str) -> bytes:
    labels = name.rstrip(".").encode("ascii").split(b".")
    if len(name.rstrip(".")) > 253 or any(not 0 < len(label) < 64 for label in labels):
        raise ValueError(f"not a DNS name: {name!r}")
    return b"".join(bytes([len(label)]) + label for label in labels) + b"\0"


def build_query(qid: int, name: str, qtype: int) -> bytes:
    # Flags: RD (recursion desired). One question.
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + struct.pack("!HH", qtype, CLASS_IN)


def read_name(msg: bytes, offset: int) -> tuple[str, int]:
    """The name at ``offset`` (lower case, no trailing dot) and the offset after it, following compression
    pointers (RFC 1035 4.1.4) at most MAX_POINTERS times, never past the message."""
    labels: list[str] = []
    end: Optional[int] = None
    length = 0
    pointers = 0
    while True:
        if offset >= len(msg):
            raise DnsError("malformed DNS answer: a name runs past the message")
        n = msg[offset]
        if n & 0xC0 == 0xC0:
            if offset + 1 >= len(msg):
                raise DnsError("malformed DNS answer: a cut compression pointer")
            pointers += 1
            if pointers > MAX_POINTERS:
                raise DnsError("malformed DNS answer: too many compression pointers (a loop)")
            if end is None:
                end = offset + 2
            offset = ((n & 0x3F) << 8) | msg[offset + 1]
            continue
        if n & 0xC0:
            raise DnsError("malformed DNS answer: an unknown label type")
        if n == 0:
            return ".".join(labels).lower(), end if end is not None else offset + 1
        label = msg[offset + 1 : offset + 1 + n]
        if len(label) != n:
            raise DnsError("malformed DNS answer: a label runs past the message")
        length += n + 1
        if length > 255:
            raise DnsError("malformed DNS answer: a name longer than 255 bytes")
        labels.append(label.decode("ascii", errors="replace"))
        offset += 1 + n


def parse_answer(msg: bytes, qid: int, name: str, qtype: int) -> _Answer:
    """The records of type ``qtype`` answering ``name`` (following a CNAME chain within the answer)."""
    if len(msg) < 12:
        raise DnsError("malformed DNS answer: shorter than its header")
    rid, flags, qd, an = struct.unpack_from("!HHHH", msg, 0)
    if rid != qid or not flags & 0x8000:
        raise DnsError("a DNS answer to another query")
    if flags & 0x0200:
        raise DnsError(f"the DNS answer for {name} was truncated (more than {MAX_ANSWER_BYTES} bytes; no TCP here)")
    rcode = flags & 0x000F
    if rcode == RCODE_NXDOMAIN:
        return _Answer(True, [])
    if rcode != 0:
        raise DnsError(f"the DNS server answered {name} with rcode {rcode}")
    if qd != 1 or an > MAX_RECORDS:
        raise DnsError("malformed DNS answer: unexpected counts")
    qname, offset = read_name(msg, 12)
    wanted = name.rstrip(".").lower()
    if qname != wanted or msg[offset : offset + 4] != struct.pack("!HH", qtype, CLASS_IN):
        raise DnsError("a DNS answer to another question")
    offset += 4
    owners = {wanted}
    records = []
    for _ in range(an):
        owner, offset = read_name(msg, offset)
        if offset + 10 > len(msg):
            raise DnsError("malformed DNS answer: a record runs past the message")
        rtype, rclass, _ttl, rdlength = struct.unpack_from("!HHIH", msg, offset)
        offset += 10
        if offset + rdlength > len(msg):
            raise DnsError("malformed DNS answer: record data runs past the message")
        if rclass == CLASS_IN and owner in owners:
            if rtype == 5:  # CNAME: its target's records answer the question too
                owners.add(read_name(msg, offset)[0])
            elif rtype == qtype and rtype == TYPE_A and rdlength == 4:
                records.append((rtype, msg, offset))
            elif rtype == qtype and rtype == TYPE_SRV and rdlength >= 7:
                records.append((rtype, msg, offset))
        offset += rdlength
    return _Answer(False, records)


class _Exchange(asyncio.DatagramProtocol):
    def __init__(self, qid: int, answer: asyncio.Future[bytes]) -> None:
        self.qid = qid
        self.answer = answer

    def datagram_received(self, data: bytes, addr: object) -> None:
        # A datagram with another id (a late answer to an earlier try, or a spoof) is ignored, not taken.
        if len(data) >= 2 and struct.unpack_from("!H", data)[0] == self.qid and not self.answer.done():
            self.answer.set_result(data[:MAX_ANSWER_BYTES + 1])

    def error_received(self, exc: Exception) -> None:
        if not self.answer.done():
            self.answer.set_exception(exc)


async def _exchange(host: str, port: int, query: bytes, qid: int, timeout: float) -> bytes:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()
    # A connected socket: the kernel drops datagrams from any other address and port.
    transport, _ = await loop.create_datagram_endpoint(lambda: _Exchange(qid, answer), remote_addr=(host, port))
    try:
        transport.sendto(query)
        data = await asyncio.wait_for(answer, timeout)
    finally:
        transport.close()
    if len(data) > MAX_ANSWER_BYTES:
        raise DnsError(f"a DNS answer longer than {MAX_ANSWER_BYTES} bytes")
    return data
