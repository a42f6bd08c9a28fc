"""connect_fleet (deskbatch/fleet.py) and its DNS client (deskbatch/dns.py) against the fleet test/fleet.test.ts
sets up: three real pool daemons of one desktop each (``desk-0`` .. ``desk-2``, each behind a TCP proxy, each with
its own ``--instance`` and its own token, derived there by openssl from the fleet key) and a real DNS server
(dnsmasq) answering the SRV and A records of deploy/k8s's two headless Services.

Not named ``test_*.py``: the rest of the suite (test/python-client.test.ts) has no fleet; the node test runs this
file by name, with the fleet in the environment (``DESKBATCH_FLEET_*``), and checks that its tests passed. Run
alone without that environment, it is skipped. The tests run in file order and share the sessions they place:
that is the fleet's state each next one starts from (a new session's desktop is rebuilt when it closes: slow).

``DESKBATCH_FLEET_CONTROL`` is the test's stand-in for the cluster's control plane (what a kubelet and the
endpoints controller do): ``/dns?pods=..&free=..`` sets who is in ``desks`` and ``desks-free``, ``/cut?pods=..``
drops a pod's connections.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import urllib.error
import urllib.request

import pytest
from deskbatch import (
    ConnectError,
    HandshakeRefusedError,
    ReconnectOptions,
    SessionLostError,
    connect_fleet,
    pod_token,
)
from deskbatch.dns import DnsError, Resolver, build_query, parse_answer, read_name

if not os.environ.get("DESKBATCH_FLEET_DNS"):
    pytest.skip(
        "no fleet: test/fleet.test.ts runs this file with its fleet (node --import tsx --test test/fleet.test.ts)",
        allow_module_level=True,
    )

DOMAIN = os.environ["DESKBATCH_FLEET_DOMAIN"]
DNS = os.environ["DESKBATCH_FLEET_DNS"]
KEY = os.environ["DESKBATCH_FLEET_KEY"]
PODS = {p["name"]: p for p in json.loads(os.environ["DESKBATCH_FLEET_PODS"])}
CONTROL = os.environ["DESKBATCH_FLEET_CONTROL"]
ALL = ",".join(PODS)
FAST = ReconnectOptions(max_attempts=200, initial_delay=0.02, max_delay=0.1)
DEADLINE_S = 240.0
#: A desktop's start on a loaded 2-core machine (a queued session hears desktop_wait meanwhile).
START_S = 60.0

#: The sessions the tests share (see the module's comment), by name.
sessions: dict[str, object] = {}
loop = asyncio.new_event_loop()


def run(coro):
    return loop.run_until_complete(asyncio.wait_for(coro, DEADLINE_S))


def fleet(**kwargs):
    options = {"fleet_key": KEY, "dns_servers": [DNS], "client_name": "python-fleet-tests/1", "reconnect": FAST}
    options["handshake_timeout"] = START_S
    options.update(kwargs)
    return connect_fleet(DOMAIN, **options)


def computer(name, input=None, _n=[0]):
    _n[0] += 1
    block = {"type": "tool_use", "id": f"toolu_fleet{_n[0]:03d}", "name": name, "toolset_name": "computer"}
    return {**block, "input": input or {}}


async def control(path: str) -> None:
    def call() -> None:
        with urllib.request.urlopen(f"{CONTROL}{path}", timeout=30) as r:
            assert r.read() == b"ok"

    await asyncio.get_running_loop().run_in_executor(None, call)


def readyz(name: str) -> dict:
    """The pod's /readyz (503 while it has no free desktop: the body says the same)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PODS[name]['port']}/readyz", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as err:
        with err:
            return json.loads(err.read())


@pytest.fixture(scope="module", autouse=True)
def _closed_at_the_end():
    yield
    for client in sessions.values():
        loop.run_until_complete(client.close())
    loop.close()


async def until(cond, what: str, timeout: float = START_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.get_running_loop().run_in_executor(None, cond):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the DNS client, on the real dnsmasq


def test_dns_srv_and_a_records_as_the_headless_services_answer_them():
    async def go():
        resolver = Resolver([DNS])
        srv = await resolver.srv(f"_ws._tcp.desks.{DOMAIN}")
        assert sorted((r.target, r.port) for r in srv) == sorted(
            (f"{name}.desks.{DOMAIN}", p["port"]) for name, p in PODS.items()
        )
        assert await resolver.a(f"desk-1.desks.{DOMAIN}") == ["127.0.0.1"]
        # A name the server is authoritative for and does not know: NXDOMAIN (None), not an error.
        assert await resolver.a(f"desk-9.desks.{DOMAIN}") is None
        assert await resolver.srv(f"_ws._tcp.nothing.{DOMAIN}") == []

    run(go())


def test_dns_a_server_that_does_not_answer_fails_within_its_bound():
    async def go():
        # A UDP port of ours that reads nothing: every try times out.
        silent, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        port = silent.get_extra_info("sockname")[1]
        try:
            with pytest.raises(DnsError, match="no answer"):
                await Resolver([f"127.0.0.1:{port}"], timeout=0.2, tries=2).srv(f"_ws._tcp.desks.{DOMAIN}")
            # The next server is asked when the first does not answer.
            srv = await Resolver([f"127.0.0.1:{port}", DNS], timeout=0.2, tries=1).srv(f"_ws._tcp.desks.{DOMAIN}")
            assert len(srv) == len(PODS)
        finally:
            silent.close()

    run(go())


def test_dns_answers_are_checked_id_question_truncation_and_pointer_loops():
    query = build_query(0x1234, "a.example", 1)
    header = lambda qid, flags, an: struct.pack("!HHHHHH", qid, flags, 1, an, 0, 0)
    question = query[12:]
    record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([10, 0, 0, 7])
    ok = header(0x1234, 0x8180, 1) + question + record
    assert [m[o : o + 4] for _, m, o in parse_answer(ok, 0x1234, "a.example", 1).records] == [bytes([10, 0, 0, 7])]
    with pytest.raises(DnsError, match="another query"):
        parse_answer(ok, 0x4321, "a.example", 1)
    with pytest.raises(DnsError, match="another question"):
        parse_answer(ok, 0x1234, "b.example", 1)
    with pytest.raises(DnsError, match="truncated"):
        parse_answer(header(0x1234, 0x8380, 0) + question, 0x1234, "a.example", 1)
    with pytest.raises(DnsError, match="compression pointers"):
        read_name(b"\0" * 12 + b"\xc0\x0c", 12)  # a pointer to itself
    with pytest.raises(DnsError, match="past the message"):
        parse_answer(header(0x1234, 0x8180, 1) + question + record[:-2], 0x1234, "a.example", 1)


# ---------------------------------------------------------------- placement


def test_per_pod_tokens_are_the_ones_openssl_derived_from_the_fleet_key():
    for name, p in PODS.items():
        assert pod_token(KEY, f"{name}/{p['uid']}") == p["token"]
    with pytest.raises(ValueError, match="at least 32"):
        pod_token("short", "desk-0/x")


def test_three_sessions_on_three_pods_lowest_ordinal_first_never_a_draining_one_then_a_wrong_key_is_refused_401():
    async def go():
        # desk-0 is draining (out of desks-free) though its /readyz says it has room: it gets no new session.
        await control(f"/dns?pods={ALL}&free=desk-1,desk-2")
        assert readyz("desk-0")["desktops"]["free"] == 1
        # A token function (a vault, a router of your own) is the other way in.
        s2 = await fleet(fleet_key=None, token=lambda pod: PODS[pod.name]["token"])
        assert s2.placement.pod.name == "desk-1" and s2.placement.passed == []
        await control(f"/dns?pods={ALL}&free={ALL}")
        s1 = await fleet()
        s3 = await fleet()
        assert [s.placement.pod.name for s in (s1, s2, s3)] == ["desk-0", "desk-1", "desk-2"]
        assert s1.placement.pod.instance == f"desk-0/{PODS['desk-0']['uid']}"
        assert s1.placement.waited is False
        assert s3.placement.passed == [("desk-0", "no_free_desktop"), ("desk-1", "no_free_desktop")]
        for s in (s1, s2, s3):
            run_ = await s.run_batch([computer("cursor_position")])
            assert "is_error" not in run_.tool_results[0], run_.tool_results[0]
        sessions.update(s1=s1, s2=s2, s3=s3)
        with pytest.raises(HandshakeRefusedError) as refused:
            await fleet(fleet_key=os.urandom(32).hex())
        assert refused.value.status == 401
        with pytest.raises(ConnectError) as full:
            await fleet(desktop={"when_busy": "refuse"})
        assert full.value.code == "no_desktop"

    run(go())


def test_when_every_pod_is_full_a_session_waits_on_the_least_loaded_pod():
    async def go():
        waits4, waits5 = [], []
        p4 = asyncio.ensure_future(fleet(on_desktop_wait=waits4.append))
        await until(lambda: bool(waits4), "the fourth session to be queued")
        assert readyz("desk-0")["desktops"]["waiting"] == 1, "all equally loaded: the lowest ordinal"
        p5 = asyncio.ensure_future(fleet(on_desktop_wait=waits5.append))
        await until(lambda: bool(waits5), "the fifth session to be queued")
        assert readyz("desk-1")["desktops"]["waiting"] == 1, "desk-0 has one waiting: the fifth waits on desk-1"
        assert readyz("desk-0")["desktops"]["waiting"] == 1
        for p in (p4, p5):
            p.cancel()
        await asyncio.gather(p4, p5, return_exceptions=True)
        await until(
            lambda: all(readyz(n)["desktops"]["waiting"] == 0 for n in PODS), "the queued sessions to be gone"
        )

    run(go())


def test_a_dropped_connection_resumes_on_its_pinned_pod_and_the_batch_is_answered_from_the_store():
    async def go():
        s2 = sessions["s2"]
        session = s2.session_id
        # No pod is listed with room: the reconnect goes by the pod's own name, not through desks-free.
        await control(f"/dns?pods={ALL}&free=")
        reconnected = asyncio.get_running_loop().create_future()
        s2.on("reconnect", lambda w: reconnected.done() or reconnected.set_result(w))
        started = []
        cut = []

        def on_event(e):
            if e["phase"] == "started":
                started.append(e["tool_use_id"])
            if e["name"] == "wait" and e["phase"] == "started" and not cut:
                cut.append(asyncio.ensure_future(control("/cut?pods=desk-1")))

        uses = [computer("mouse_move", {"coordinate": [111, 99]}), computer("wait", {"duration": 2})]
        run_ = await s2.run_batch(uses, batch_id="fleet-resume-1", on_tool_event=on_event)
        await cut[0]
        welcome = await reconnected
        assert welcome["session_id"] == session and welcome["resumed"] is True
        assert run_.result["batch_id"] == "fleet-resume-1"
        assert run_.result["replayed"] is True, "answered from the stored result"
        assert started.count(uses[0]["id"]) == 1, "mouse_move ran once"
        assert s2.placement.pod.name == "desk-1"
        pos = await s2.run_batch([computer("cursor_position")])
        assert "111" in json.dumps(pos.tool_results[0]) and "99" in json.dumps(pos.tool_results[0])

    run(go())


def test_a_pod_gone_for_good_fails_the_batch_and_every_later_one_with_session_lost():
    async def go():
        s3 = sessions["s3"]
        before = {n: readyz(n)["desktops"] for n in ("desk-0", "desk-1")}
        closed = asyncio.get_running_loop().create_future()
        s3.on("close", lambda *a: closed.done() or closed.set_result(True))

        async def node_fails():
            # Its names go from DNS, then its connections drop (the daemon stays: only DNS says it is gone).
            await control("/dns?pods=desk-0,desk-1&free=")
            await control("/cut?pods=desk-2")

        failing = []

        def on_event(e):
            if e["phase"] == "started" and not failing:
                failing.append(asyncio.ensure_future(node_fails()))

        with pytest.raises(SessionLostError) as lost:
            await s3.run_batch([computer("wait", {"duration": 30})], on_tool_event=on_event)
        await failing[0]
        assert lost.value.sent is True
        assert "desk-2 is gone" in str(lost.value)
        await asyncio.wait_for(closed, 30)
        with pytest.raises(SessionLostError) as later:
            await s3.run_batch([computer("cursor_position")])
        assert later.value.sent is False
        # No session was started anywhere else behind the caller's back.
        assert {n: readyz(n)["desktops"] for n in ("desk-0", "desk-1")} == before
        await control(f"/dns?pods={ALL}&free={ALL}")

    run(go())
