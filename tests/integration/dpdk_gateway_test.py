#!/usr/bin/python3
"""sluiced's DPDK engine end to end, in network namespaces it creates (DESIGN.md section 7):

    C (clients) c0 10.77.1.2 <-> g0 | G: sluiced, DPDK on net_af_packet g0 and g1, net_tap
    dtap0 (kernel, 10.77.3.1: the spill listener) | g1 <-> n0, bridged in N with n1 <-> m0 in
    N2: N (node 1 and the sink) 10.77.2.10 and .12, N2 (node 2) 10.77.2.11

Two RabbitMQ nodes, each in its own namespace (node 1 in N, node 2 in N2; STOMP on
10.77.2.10:61613 and 10.77.2.11:61613), clustered over that link (long node names
sluice1@10.77.2.10 and sluice2@10.77.2.11, an epmd in each namespace), and for the bulk cases a
STOMP sink (stomp_sink.py) on 10.77.2.12:61613 in N. Clients are real Linux TCP stacks in C
(stomp.py, sluice-load, a raw socket) that reach the virtual IP 10.77.1.1:61613.

(a) queues placed by Sluice are created on the chosen node; messages flow both ways (the checks
    of gateway_test.py's case (a));
(b) queues pinned to each node in the config are created on, and consumed from, that node
    (RabbitMQ's management API says where);
(o) a client's port comes round while its ended flow lingers in the engine: a session on a queue
    pinned to one node ends with a RST, a new one from the same address and port subscribes to
    a queue pinned to the other node; it is a new session (a cookie, its own routing decision),
    so the queue is created on its own node, not on the old flow's owner;
(f) the login check at CONNECT on the packet path (login_check eager): a good CONNECT gets the
    node's own CONNECTED (RabbitMQ's server and session headers); a wrong passcode and an
    unknown vhost get the node's ERROR at once, then the close, and the SEND behind them
    places nothing (the queue is not in the table) and is logged (session_end
    reason=login_refused); a client that asked for heart-beats and falls silent in the prelude
    gets the gateway's beats and is closed within twice its interval;
(g) sluice-load, 20 producers and 20 consumers on 4 queues, receipts on: nothing lost,
    duplicated or out of order;
(c) the owner stopped: the session spills (RECEIPT only once durable), a consumer is told
    "owner unavailable, retry later"; the owner back: the drainer delivers every receipted
    message once, in order (gateway_test.py's case (c));
(r) a first SEND of 8 KiB to the sink: the replay to the owner spans several segments, on the
    login check's connection, kept as the owner leg;
(t) 1 GiB in the body of one SEND through one spliced session to the sink: SHA-256 at the sink
    equals SHA-256 of what the client sent (a seeded pseudo-random stream made in chunks). A
    small SEND binds the session first: until it is bound the gateway reads the frames as
    STOMP and refuses a body over limits.body_bytes_max (1 MiB by default, at most 64 MiB);
(l) the same, 1 GiB, through 1% random packet loss both ways at the client (nftables output
    and input hooks in C; an output drop loses one of TCP's GSO packets, a burst of segments):
    the client's retransmissions pass the splice, the checksum is still exact.

The engine has 32 local ports for owner legs, fewer than the sessions of (a) to (c): new owner
legs take the ports of ended, lingering flows (checked: sluice_dpdk_lingering_evicted_total > 0).

Usage: dpdk_gateway_test.py SLUICED SLUICECTL SLUICE_LOAD  (as root)
$SLUICE_DPDK_CASES (e.g. "tl") runs some of the cases only. The RabbitMQ cluster is always a
private one inside N and N2 ($SLUICE_RABBIT_CLUSTER does not apply: its nodes are not there).
"""

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gateway_test  # noqa: E402
from gateway_util import (Failure, RawStomp, Sluiced, add_spill_user, base_config,  # noqa: E402
                          check, check_metrics_documented, close_quietly, connect_frame,
                          disconnect_with_receipt, frame,
                          node_section, pin_section,
                          say, send_receipted, stomp_client, wait_until)
from netns_util import IP, NetnsError, Topology, netns, run  # noqa: E402
from stomp_sink import Sink  # noqa: E402

VIP = "10.77.1.1"
PORT = 61613
LOCAL_IP = "10.77.2.1"  # the owner leg's source address
# 32 local ports: the sessions of (a) to (c), over 50, outnumber them, so new owner legs take the
# ports of flows that ended and still linger (the oldest gives way), and the owner may still hold
# a TIME_WAIT there, as on a busy gateway; at most 24 sessions are live at once, in (g).
LOCAL_PORT_MIN, LOCAL_PORT_MAX = 20000, 20031
SPILL_IP = "10.77.3.1"  # the kernel's end of the TAP: the spill listener
SPILL_PORT = 61700
TAP = "dtap0"
NODE_ADDRESSES = (f"{Topology.NODE_IPS[0]}:{PORT}", f"{Topology.NODE_IPS[1]}:{PORT}")
SINK_ADDRESS = f"{Topology.NODE_IPS[2]}:{PORT}"

PREFIX = "sluice-dpdk-%d-" % os.getpid()
CLUSTER_START_S = 120
TAP_TIMEOUT_S = 30
MESSAGES = 5
LOAD = {"producers": 20, "consumers": 20, "queues": 4, "per_producer": 150, "duration_s": 30}
LOAD_TIMEOUT_S = 90
BULK_BYTES = 1 << 30
REPLAY_BODY_BYTES = 8192
LOSSY_BYTES = 1 << 30  # see (l) above
LOSS_PERCENT = 1
CHUNK_BYTES = 1 << 20
BULK_TIMEOUT_S = 300
IO_TIMEOUT_S = 60  # one send or recv of the bulk transfer


# ---------------------------------------------------------------------------------------------
# sluiced with the DPDK engine, inside G


def dpdk_section(topo):
    eal = ["--no-huge", "--no-pci", "-m", "512", "--no-shconf", "--no-telemetry",
           "--file-prefix", topo.g, "--vdev", "net_af_packet0,iface=g0",
           "--vdev", "net_af_packet1,iface=g1", "--vdev", f"net_tap0,iface={TAP}"]
    return f"""
[dpdk]
eal_args = {json.dumps(eal)}
ports = ["net_af_packet0", "net_af_packet1"]
exception_port = "net_tap0"
local_ips = ["{LOCAL_IP}"]
local_port_min = {LOCAL_PORT_MIN}
local_port_max = {LOCAL_PORT_MAX}
routes = ["10.77.1.0/24 net_af_packet0", "10.77.2.0/24 net_af_packet1", "10.77.3.0/24 net_tap0"]
spill_listen = "{SPILL_IP}:{SPILL_PORT}"
flows_max = 65536
prelude_flows_max = 1024
mbufs = 16383
"""


class DpdkSluiced(Sluiced):
    """sluiced run by `ip netns exec G`; once it answers, the TAP it made gets the spill
    listener's address and the route back to the engine's local address."""

    def __init__(self, sluiced, sluicectl, work, config_text, topo):
        super().__init__(sluiced, sluicectl, work, config_text, PORT)
        self.topo = topo

    def command(self):
        return [IP, "netns", "exec", self.topo.g, *super().command()]

    def after_answering(self):
        g = self.topo.g

        def tap_exists():
            check(self.proc.poll() is None,
                  f"sluiced exited {self.proc.returncode}:\n{self.log_tail()}")
            return self.topo.link_exists(g, TAP)
        wait_until(f"sluiced to create {TAP} in {g}", TAP_TIMEOUT_S, tap_exists)
        # A restarted sluiced makes a new TAP: set it up every time. The kernel answers the
        # engine's local address (spill sessions' owner leg) and reaches the nodes (health
        # probes, drainer) and clients through the engine (doc/dpdk.md).
        run(IP, "addr", "replace", f"{SPILL_IP}/24", "dev", TAP, ns=g)
        run(IP, "link", "set", TAP, "up", ns=g)
        for prefix in (f"{LOCAL_IP}/32", "10.77.2.0/24", "10.77.1.0/24"):
            run(IP, "route", "replace", prefix, "dev", TAP, ns=g)

    def probe_connect(self):
        with netns(self.topo.c):
            return socket.create_connection((VIP, PORT), timeout=1)

    def _until_ready(self):
        super()._until_ready()
        # The first probes ran before the TAP had its routes: wait for them to succeed.
        try:
            wait_until("every node up", 15,
                       lambda: self.status()["nodes_up"] == self.status()["nodes"])
        except Failure:
            raise Failure(f"nodes not up after the start: {self.ctl_json('nodes')}")
        return self

    def wait_idle(self, timeout_s=15):
        """No flow in the prelude and no spill session. (Not `sessions.active` == 0: it counts
        the engine's flows, and a closed flow lingers there for fin_timeout_ms, 60 s.)"""
        def idle():
            s = self.status()
            return s["sessions"]["prelude"] == 0 and \
                all(lc["prelude_flows"] == 0 for lc in s["dataplane"]["lcores"]) and \
                self.ctl_json("sessions")["total"] == 0
        try:
            wait_until("no session in the prelude or spilling", timeout_s, idle, interval_s=0.2)
        except Failure:
            raise Failure(f"sessions did not settle within {timeout_s} s: {self.status()}; "
                          f"sessions: {self.ctl_json('sessions')}")

    def metric(self, name, labels=""):
        """The value of one sample of `sluicectl metrics` (0 when absent)."""
        want = f"{name}{{{labels}}}" if labels else name
        for line in self.ctl("metrics").stdout.splitlines():
            key, _, value = line.rpartition(" ")
            if key == want:
                return float(value)
        return 0.0


# ---------------------------------------------------------------------------------------------
# The cases


class Run(gateway_test.Run):
    gw_host = VIP

    def __init__(self, sluiced, sluicectl, sluice_load, cluster, topo, work):
        super().__init__(sluiced, sluicectl, cluster, work)
        self.sluice_load, self.topo = sluice_load, topo
        self.sink = None

    def queue_name(self, suffix):
        q = PREFIX + suffix
        self.queues.append(q)
        return q

    def case_placed(self):
        super().case_placed()
        # Every session of (a) has ended: none counts as active, and their flows, which linger
        # for stragglers (fin_timeout_ms), are counted apart.
        gw = self.gw

        def settled():
            s = gw.status()
            lcores = s["dataplane"]["lcores"]
            return s["sessions"]["active"] == 0 and \
                sum(lc["lingering_flows"] for lc in lcores) > 0 and \
                all(lc["flows"] == lc["lingering_flows"] for lc in lcores)
        try:
            wait_until("no active session, the ended flows lingering", 15, settled, interval_s=0.2)
        except Failure as e:
            raise Failure(f"{e}: {gw.status()}") from None
        lingering = sum(lc["lingering_flows"] for lc in gw.status()["dataplane"]["lcores"])
        say(f"ok (a): sessions ended: 0 active, {lingering} flows lingering (counted apart)")

    def start_gateway(self, name, nodes, spill, extra=""):
        work = os.path.join(self.work, name)
        os.makedirs(work, exist_ok=True)
        # Debug level: every routing decision is a line (session_routed: which engine thread,
        # which route, what its replica held), printed when a case fails.
        text = base_config(name, work, PORT, self.cluster, nodes=nodes, spill=spill,
                           extra=dpdk_section(self.topo) + extra, gateway='engine = "dpdk"',
                           listen_host=VIP, log_level="debug")
        # Set before start(): a start that times out still has its log printed and is stopped.
        self.gw = DpdkSluiced(self.sluiced, self.sluicectl, work, text, self.topo)
        return self.gw.start()

    def rabbit_nodes(self):
        return "".join(node_section(f"rabbit{i + 1}", n["stomp_address"], n["name"])
                       for i, n in enumerate(self.cluster.nodes))

    # -- (f) the login check ---------------------------------------------------------------

    def case_login(self):
        """Runs first: the login is not in the cache yet."""
        gw = self.gw

        def good_connect():
            r = RawStomp(gw.port, host=self.gw_host)
            try:
                r.send(connect_frame(self.login, self.passcode))
                return r.read_frame()
            finally:
                r.close()
        accepted = gw.metric("sluice_dpdk_login_accepted_total")
        f = good_connect()
        check(f and f.command == "CONNECTED" and f.headers.get("server", "").startswith("RabbitMQ")
              and f.headers.get("session", "") and not f.headers["session"].startswith("sluice-"),
              f"a good CONNECT: expected the node's own CONNECTED, got {f}")
        # The engine's metrics are a snapshot, 100 ms fresh.
        wait_until("the node's acceptance counted", 5,
                   lambda: gw.metric("sluice_dpdk_login_accepted_total") == accepted + 1)
        say(f"ok (f): the node's own CONNECTED (server {f.headers['server']!r}, "
            f"session {f.headers['session']!r})")
        # The same login again: answered from the cache, in the name of the node that accepted it.
        cached = gw.metric("sluice_dpdk_login_cached_total")
        f = good_connect()
        check(f and f.command == "CONNECTED" and f.headers.get("server", "").startswith("RabbitMQ"),
              f"a cached CONNECT: expected the node's server header, got {f}")
        wait_until("the answer from the login cache counted", 5,
                   lambda: gw.metric("sluice_dpdk_login_cached_total") == cached + 1)
        say(f"ok (f): the same login again: from the cache, server {f.headers['server']!r}")
        refused = gw.metric("sluice_dpdk_login_refused_total")
        for what, connect in (
                ("a wrong passcode", connect_frame(self.login, "wrong-" + self.passcode)),
                ("an unknown vhost", connect_frame(self.login, self.passcode).replace(
                    b"host:/\n", b"host:sluice-no-such-vhost\n"))):
            q = self.queue_name("f-" + what.split()[-1])
            r = RawStomp(gw.port, host=self.gw_host)
            try:
                r.send(connect + frame("SEND", [("destination", "/queue/" + q),
                                                ("receipt", "r1")], b"bad"))
                f = r.read_frame()
                check(f and f.command == "ERROR", f"{what}: expected the node's ERROR, got {f}")
                rest = r.wait_closed()
                check(rest == b"", f"{what}: bytes after the ERROR: {rest!r}")
            finally:
                r.close()
            check(("/", q) not in gw.queues(), f"{what}: the queue {q} was placed")
            say(f"ok (f): {what}: the node's ERROR (message {f.headers.get('message')!r}), "
                f"the close, nothing placed")
        wait_until("both refusals counted", 5,
                   lambda: gw.metric("sluice_dpdk_login_refused_total") >= refused + 2)
        # One session_end line each, with the client's address, the node and its message.
        def refusals_logged():
            return sum(1 for line in gw.log_text().splitlines()
                       if "session_end" in line and "reason=login_refused" in line
                       and "client=10.77.1.2:" in line and "owner=rabbit" in line
                       and 'message="Bad CONNECT"' in line) >= 2
        wait_until("the refusals logged", 5, refusals_logged)
        # Heart-beats: the gateway speaks for the session in the prelude.
        beating = connect_frame(self.login, self.passcode).replace(b"heart-beat:0,0",
                                                                   b"heart-beat:1000,1000")
        r = RawStomp(gw.port, host=self.gw_host)
        try:
            r.send(beating)
            f = r.read_frame()
            check(f and f.command == "CONNECTED" and f.headers.get("heart-beat") == "1000,1000",
                  f"heart-beats: expected CONNECTED with 1000,1000, got {f}")
            took, got = self.silent_after(r, "a silent client in the DPDK prelude")
        finally:
            r.close()
        beats = len(got) - len(got.lstrip(b"\n"))
        check(beats >= 1 and b"message:heart-beat timeout" in got,
              f"a silent client in the DPDK prelude got {got!r}")
        check(1.5 <= took <= 2.5, f"the DPDK prelude closed a silent client after {took:.1f} s "
              f"(its interval 1 s, grace 2 s)")
        say(f"ok (f): heart-beats 1000,1000: {beats} beat(s), then closed after {took:.1f} s")

    # -- (b) pinned ---------------------------------------------------------------------------

    def case_pinned(self, pinned):
        gw = self.gw
        for q, node in pinned.items():
            want = self.cluster.nodes[int(node[len("rabbit"):]) - 1]["name"]
            rec = self.owner_of(q)
            check(rec["source"] == "pinned" and rec["node"] == node,
                  f"queue {q} pinned to {node} in the config: sluicectl queues says {rec}")
            c, lis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
            try:
                c.subscribe(destination="/queue/" + q, id="1", ack="auto")
                home = wait_until(f"queue {q} in the management API", 10,
                                  lambda: self.rabbit_home(q))
                check(home == want, f"queue {q} pinned to {node} ({want}) was created on {home}")
                nodes = wait_until(f"the consumer of {q} in the management API", 15,
                                   lambda: self.consumer_nodes(q))
                check(nodes == [want], f"consumer of {q} through sluiced is on {nodes}, the pin "
                      f"says {want}")
                p, plis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
                try:
                    send_receipted(p, plis, "/queue/" + q, [f"{q}-{i}" for i in range(MESSAGES)])
                finally:
                    close_quietly(p)
                wait_until(f"messages of {q}", 10,
                           lambda: len(lis.bodies()) >= MESSAGES or lis.errors)
                check(lis.bodies() == [f"{q}-{i}" for i in range(MESSAGES)] and not lis.errors,
                      f"consumer of {q} got {lis.bodies()}, errors {lis.errors}")
            finally:
                close_quietly(c)
        gw.wait_idle()
        say(f"ok (b): pinned queues {pinned} created on and consumed from their node")

    # -- (o) a client port that comes round while its flow lingers -------------------------------

    def case_reopen(self, pins):
        gw = self.gw
        (q1, n1), (q2, n2) = pins.items()
        want = self.cluster.nodes[int(n2[len("rabbit"):]) - 1]["name"]
        before = gw.metric("sluice_dpdk_flows_reopened_total")

        def session(q, source_port=0):
            r = RawStomp(gw.port, host=self.gw_host, source_port=source_port)
            r.send(connect_frame(self.login, self.passcode))
            f = r.read_frame()
            check(f is not None and f.command == "CONNECTED", f"expected CONNECTED, got {f}")
            r.send(frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "1"),
                                       ("receipt", "sub")]))
            f = r.read_frame()
            check(f is not None and f.command == "RECEIPT",
                  f"SUBSCRIBE to {q}: expected its RECEIPT from the owner, got {f}")
            return r

        r = session(q1)
        port = r.sock.getsockname()[1]
        # An abortive close: the RST ends the flow, which lingers in the engine for
        # reset_linger_ms, and leaves no TIME_WAIT here, so the port is free at once.
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        r.sock.close()
        r = session(q2, source_port=port)
        try:
            home = wait_until(f"queue {q2} in the management API", 10,
                              lambda: self.rabbit_home(q2))
            check(home == want, f"queue {q2}, pinned to {n2} ({want}), subscribed to from port "
                  f"{port} while its flow to {n1} lingered, was created on {home}")
            # `sluicectl sessions` lists the lcore's flows after the io_uring workers' sessions:
            # this one, spliced to its node; the lingering flow from the same port is no
            # longer a session.
            listed = gw.ctl_json("sessions")
            mine = [x for x in listed["sessions"] if x["client"].endswith(f":{port}")]
            check(len(mine) == 1 and mine[0]["state"] == "spliced" and mine[0]["queue"] == q2
                  and mine[0]["owner"] == n2 and mine[0]["worker"] >= 1
                  and mine[0]["id"] >> 48 == mine[0]["worker"]
                  and listed["unanswered_workers"] == [],
                  f"sluicectl sessions, for the session from port {port} on {q2} spliced to "
                  f"{n2}: {listed}")
            disconnect_with_receipt(r, "bye", f"DISCONNECT of the session on {q2}")
        finally:
            r.sock.close()
        # The engine's counters reach the admin API in snapshots (every 100 ms).
        try:
            wait_until("sluice_dpdk_flows_reopened_total to go up", 5,
                       lambda: gw.metric("sluice_dpdk_flows_reopened_total") - before >= 1,
                       interval_s=0.2)
        except Failure:
            raise Failure(f"sluice_dpdk_flows_reopened_total went up by "
                          f"{gw.metric('sluice_dpdk_flows_reopened_total') - before}")
        gw.wait_idle()
        say(f"ok (o): a new connection from port {port} while its flow to {n1} lingered: a new "
            f"session, {q2} created on its own node {n2}")

    # -- (g) sluice-load ----------------------------------------------------------------------

    def case_load(self):
        pattern = PREFIX + "load-{i}"
        for i in range(LOAD["queues"]):
            self.queues.append(pattern.format(i=i))
        cmd = [self.sluice_load, "--target", f"{VIP}:{PORT}", "--login", self.login,
               "--passcode-file", self.cluster.passcode_file,
               "--connections", str(LOAD["producers"]), "--producers-per-connection", "1",
               "--consumer-connections", str(LOAD["consumers"] // 5),
               "--consumers-per-connection", "5", "--queues", str(LOAD["queues"]),
               "--queue-pattern", pattern, "--destination-prefix", "/queue/",
               "--spread", "fixed", "--size", "uniform:16-1K",
               "--count", str(LOAD["per_producer"]), "--duration", str(LOAD["duration_s"]),
               "--window", "16", "--ack", "client", "--prefetch", "64",
               "--drain-timeout", "20", "--json"]
        t0 = time.monotonic()
        with netns(self.topo.c):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
            except subprocess.TimeoutExpired as e:
                raise Failure(f"sluice-load did not end in {LOAD_TIMEOUT_S} s: "
                              f"{(e.stdout or b'')[-2000:]!r}")
        took = time.monotonic() - t0
        check(r.returncode == 0, f"sluice-load exited {r.returncode}\n{r.stdout[-3000:]}\n"
              f"{r.stderr[-3000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        check(res["result"] == "ok" and res["checked"], f"sluice-load: {res}")
        for key in ("lost", "lost_acknowledged", "duplicated", "out_of_order", "unconfirmed",
                    "errors", "foreign"):
            check(res[key] == 0, f"sluice-load: {key} = {res[key]}: {res}")
        want = LOAD["producers"] * LOAD["per_producer"]
        check(res["sent"] == res["acknowledged"] == res["received"] == want,
              f"sluice-load sent {res['sent']}, acknowledged {res['acknowledged']}, received "
              f"{res['received']}, expected {want} each: {res}")
        self.gw.wait_idle()
        say(f"ok (g): sluice-load {want} messages, {LOAD['producers']} producers and "
            f"{LOAD['consumers']} consumers on {LOAD['queues']} queues in {took:.1f} s "
            f"({res['throughput_msg_s']:.0f} msg/s): none lost, duplicated or out of order")

    # -- (t), (l) one spliced session, byte-exact ---------------------------------------------

    def bulk(self, label, q, nbytes, seed):
        """Sends nbytes in one SEND's body through one session to the sink; checks its hash."""
        gw = self.gw
        before = len(self.sink.reports())
        spliced_bytes = "sluice_dpdk_spliced_bytes_total"
        c2o = gw.metric(spliced_bytes, 'direction="client_to_owner"')
        spliced = gw.metric("sluice_dpdk_spliced_total")
        established = gw.metric("sluice_dpdk_established_path_total")
        fast = gw.metric("sluice_dpdk_fast_path_total")
        deadline = time.monotonic() + BULK_TIMEOUT_S
        with netns(self.topo.c):
            r = RawStomp(PORT, timeout_s=10, host=VIP)
        try:
            r.send(connect_frame(self.login, self.passcode))
            f = r.read_frame()
            # The sink's CONNECTED: it checked the login (or did for an earlier session of
            # this login, then the gateway answered from its login cache with the sink's name).
            check(f is not None and f.command == "CONNECTED" and f.headers.get("server") == "sink",
                  f"({label}) expected the sink's CONNECTED, got {f}")
            # Until the session is bound the gateway reads frames as STOMP and refuses a body
            # over limits.body_bytes_max: a small SEND binds it, the big one is then spliced.
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "bind")], b"bind",
                         content_length=True))
            f = r.read_frame(timeout_s=10)
            check(f is not None and f.command == "RECEIPT" and
                  f.headers.get("receipt-id") == "bind", f"({label}) expected the sink's "
                  f"RECEIPT bind, got {f}; sink: {self.sink.reports()[before:]}")
            r.send(f"SEND\ndestination:/queue/{q}\nreceipt:bulk\ncontent-type:"
                   f"application/octet-stream\ncontent-length:{nbytes}\n\n".encode())
            r.sock.settimeout(IO_TIMEOUT_S)
            rng = random.Random(seed)
            h = hashlib.sha256()
            sent = 0
            t0 = time.monotonic()
            while sent < nbytes:
                chunk = rng.randbytes(min(CHUNK_BYTES, nbytes - sent))
                h.update(chunk)
                try:
                    r.sock.sendall(chunk)
                except OSError as e:
                    raise Failure(f"({label}) sending failed after {sent} of {nbytes} bytes: "
                                  f"{e}; status: {gw.status()}")
                sent += len(chunk)
                check(time.monotonic() < deadline,
                      f"({label}) only {sent} of {nbytes} bytes sent in {BULK_TIMEOUT_S} s")
            r.send(b"\0")
            send_s = time.monotonic() - t0
            f = r.read_frame(timeout_s=max(1.0, deadline - time.monotonic()))
            check(f is not None and f.command == "RECEIPT" and
                  f.headers.get("receipt-id") == "bulk", f"({label}) expected RECEIPT bulk from "
                  f"the sink, got {f}; sink: {self.sink.reports()[before:]}")
            took = time.monotonic() - t0
            r.send(frame("DISCONNECT", [("receipt", "bye")]))
            f = r.read_frame(timeout_s=10)
            check(f is not None and f.command == "RECEIPT", f"({label}) DISCONNECT: got {f}")
        finally:
            r.close()
        got = self.sink.reports()[before:]
        check(len(got) == 2 and all("sha256" in x for x in got) and len({x["peer"] for x in got})
              == 1, f"({label}) expected two SENDs on one connection at the sink, it reports "
              f"{got}")
        got = got[1]
        check(got["bytes"] == nbytes and got["nul"] and got["destination"] == "/queue/" + q,
              f"({label}) the sink got {got}, {nbytes} bytes were sent to /queue/{q}")
        check(got["sha256"] == h.hexdigest(), f"({label}) SHA-256 differs: sent "
              f"{h.hexdigest()}, the sink computed {got['sha256']} over {got['bytes']} bytes")
        # Spliced by the engine, from its local address pool: not a spill session drained later.
        peer_ip, peer_port = got["peer"].rsplit(":", 1)
        check(peer_ip == LOCAL_IP and LOCAL_PORT_MIN <= int(peer_port) <= LOCAL_PORT_MAX,
              f"({label}) the sink's peer is {got['peer']}, not the engine's owner leg "
              f"({LOCAL_IP}:{LOCAL_PORT_MIN}-{LOCAL_PORT_MAX})")
        # The engine publishes its counters every 100 ms: poll a little.
        deltas = []

        def counted():
            deltas[:] = [gw.metric("sluice_dpdk_spliced_total") - spliced,
                         gw.metric(spliced_bytes, 'direction="client_to_owner"') - c2o,
                         gw.metric("sluice_dpdk_established_path_total") - established,
                         gw.metric("sluice_dpdk_fast_path_total") - fast]
            return deltas[1] >= nbytes
        with contextlib.suppress(Failure):
            wait_until("the spliced bytes counted", 3, counted, interval_s=0.2)
        spliced_delta, c2o_delta, established_delta, fast_delta = deltas
        check(spliced_delta == 1 and c2o_delta >= nbytes,
              f"({label}) the engine counted {spliced_delta:.0f} spliced flows and "
              f"{c2o_delta:.0f} spliced bytes client to owner for {nbytes} bytes sent")
        # Linux's data segments (timestamps, no IPv4 options; SACK blocks only when it reports
        # a loss of its own) are the established-flow path's shape. The client sent at least
        # nbytes / 1,460 of them on these 1,500-byte links; at least half must have taken it.
        data_segments = nbytes // 1460
        check(established_delta >= data_segments // 2,
              f"({label}) {established_delta:.0f} segments took the established-flow path; the "
              f"client sent at least {data_segments} data segments")
        # Most of those are the driver's fast path's too: it leaves a burst to the general path
        # from its first frame of another shape (an ARP, another flow's SYN, a SACK) on.
        check(fast_delta >= data_segments // 4,
              f"({label}) {fast_delta:.0f} segments took the driver's fast path; the client sent "
              f"at least {data_segments} data segments")
        gw.wait_idle()
        return took, send_s, established_delta, fast_delta

    def case_replay(self):
        """The first SEND carries an 8 KiB body: the replay to the owner spans several segments
        of the owner leg. The gateway's first session: the sink checks its login, and that
        connection is kept as the owner leg (the sink owns the queue), so the replay is the SEND
        alone, after the CONNECT the sink has answered."""
        gw = self.gw
        kept = gw.metric("sluice_dpdk_login_conn_kept_total")
        q = self.queue_name("replay")
        body = random.Random(3).randbytes(REPLAY_BODY_BYTES)
        before = len(self.sink.reports())
        r = RawStomp(PORT, timeout_s=10, host=VIP)
        try:
            r.send(connect_frame(self.login, self.passcode))
            f = r.read_frame()
            check(f is not None and f.command == "CONNECTED", f"(r) expected CONNECTED, got {f}")
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "big")], body,
                         content_length=True))
            f = r.read_frame(timeout_s=10)
            check(f is not None and f.command == "RECEIPT" and
                  f.headers.get("receipt-id") == "big",
                  f"(r) a first SEND of {len(body)} bytes: expected the sink's RECEIPT, got {f}; "
                  f"sink: {self.sink.reports()[before:]}; engine: {gw.status()['dataplane']}")
            disconnect_with_receipt(r, "bye", "(r) DISCONNECT")
        finally:
            r.close()
        got = self.sink.reports()[before:]
        check(len(got) == 1 and got[0].get("sha256") == hashlib.sha256(body).hexdigest(),
              f"(r) the sink got {got}, expected one SEND of {len(body)} bytes with SHA-256 "
              f"{hashlib.sha256(body).hexdigest()}")
        gw.wait_idle()
        wait_until("the login check's connection kept", 5,
                   lambda: gw.metric("sluice_dpdk_login_conn_kept_total") == kept + 1)
        say(f"ok (r): a first SEND of {len(body)} bytes (a replay of several segments, on the "
            f"login check's connection) reached the owner byte for byte")

    def case_bulk(self):
        q = self.queue_name("bulk")
        took, _, established, fast = self.bulk("t", q, BULK_BYTES, 1)
        say(f"ok (t): {BULK_BYTES >> 20} MiB through one spliced session in {took:.1f} s "
            f"({BULK_BYTES / took / 1e6:.0f} MB/s), SHA-256 equal at the sink; "
            f"{established:.0f} segments by the established-flow path, {fast:.0f} of them by "
            f"the driver's fast path")

    def case_lossy(self):
        q = self.queue_name("lossy")
        c = self.topo.c
        hooks = self.topo.add_loss(c, "c0", LOSS_PERCENT)
        try:
            took, _, _, _ = self.bulk("l", q, LOSSY_BYTES, 2)
            counters = self.topo.loss_counters(c)
        finally:
            self.topo.remove_loss(c, "c0")
        dropped = [int(x) for x in re.findall(r"counter packets (\d+)", counters)]
        check(dropped and all(d > 0 for d in dropped),
              f"(l) nftables dropped nothing ({dropped}): the loss rule did not apply:\n"
              f"{counters}")
        say(f"ok (l): {LOSSY_BYTES >> 20} MiB at {LOSS_PERCENT}% loss ({'+'.join(hooks)} in "
            f"{c}; dropped {dropped} packets) in {took:.1f} s "
            f"({LOSSY_BYTES / took / 1e6:.1f} MB/s), SHA-256 equal at the sink")

    # -- run ----------------------------------------------------------------------------------

    def run(self):
        selected = os.environ.get("SLUICE_DPDK_CASES", "fabogcrtl")
        times = {}
        failed = {}
        t = time.monotonic()

        def timed(name, case, *args):
            """Runs one case; a failed case is reported and the next one still runs (once the
            gateway sees every node up again: a failed bind counts against its owner)."""
            if name not in selected:
                return
            t0 = time.monotonic()
            try:
                case(*args)
            except Failure as e:
                failed[name] = str(e)
                print(f"FAILED ({name}): {e}", file=sys.stderr, flush=True)
                self.print_engine_state()
                with contextlib.suppress(Failure):
                    wait_until("every node up", 10, lambda: self.gw.status()["nodes_up"] ==
                               self.gw.status()["nodes"])
            times[name] = time.monotonic() - t0

        if any(x in selected for x in "fabogc"):
            pinned = {self.queue_name("b1"): "rabbit1", self.queue_name("b2"): "rabbit2"}
            reopen_pins = {self.queue_name("o1"): "rabbit1", self.queue_name("o2"): "rabbit2"}
            work = os.path.join(self.work, "dpdk-main")
            os.makedirs(work, exist_ok=True)
            users = os.path.join(work, "spill-users")
            # Spill sessions log in with the same credentials the owner takes directly.
            add_spill_user(self.sluicectl, users, self.login, self.passcode,
                           [f"/:{PREFIX}*"], work)
            nodes = self.rabbit_nodes() + "".join(
                pin_section(q, n) for q, n in {**pinned, **reopen_pins}.items())
            self.start_gateway("dpdk-main", nodes, f'users_file = "{users}"')
            with netns(self.topo.c):
                timed("f", self.case_login)
                timed("a", self.case_placed)
                timed("b", self.case_pinned, pinned)
                timed("o", self.case_reopen, reopen_pins)
                timed("g", self.case_load)
                timed("c", self.case_owner_down)
            try:
                # The DPDK engine's families, with the others, are all in doc/metrics.md.
                families = check_metrics_documented(self.gw.ctl("metrics").stdout)
                say(f"ok: the {families} metric families served are all in doc/metrics.md")
            except Failure as e:
                failed["metrics"] = str(e)
            if all(x in selected for x in "fabogc") and not failed:
                # The narrow local port range did what it is there for (see LOCAL_PORT_MIN).
                evicted = self.gw.metric("sluice_dpdk_lingering_evicted_total")
                if evicted == 0:
                    failed["ports"] = "no owner leg took the local port of a lingering flow"
            self.stop_gateway()
        if any(x in selected for x in "rtl"):
            self.sink = Sink(self.topo, self.work, SINK_ADDRESS)
            nodes = node_section("sink", SINK_ADDRESS) + "".join(
                pin_section(PREFIX + q, "sink") for q in ("replay", "bulk", "lossy"))
            self.start_gateway("dpdk-bulk", nodes, "allow_anonymous = true")
            with netns(self.topo.c):
                timed("r", self.case_replay)
                timed("t", self.case_bulk)
                timed("l", self.case_lossy)
            self.stop_gateway()
        say("times: " + ", ".join(f"({k}) {v:.1f} s" for k, v in times.items())
            + f", total {time.monotonic() - t:.1f} s")
        # Each failure again, last: a log cut to its tail still shows what failed.
        check(not failed, f"cases {', '.join(failed)} failed (details above): " + "; ".join(
            f"({k}) {v[:1500]}" for k, v in failed.items()))

    def stop_gateway(self):
        gw = self.gw
        if gw and gw.alive():
            with contextlib.suppress(Failure):
                say(f"    engine: {gw.metric('sluice_dpdk_flows_created_total'):.0f} flows "
                    f"created, {gw.metric('sluice_dpdk_flows_reopened_total'):.0f} client SYNs "
                    f"on a lingering flow taken as new sessions, "
                    f"{gw.metric('sluice_dpdk_lingering_evicted_total'):.0f} lingering flows "
                    f"given way to new ones, "
                    f"{gw.metric('sluice_dpdk_local_ports_exhausted_total'):.0f} bindings "
                    f"without a local port")
        super().stop_gateway()

    def print_engine_state(self):
        """sluiced's log tail and the engine's non-zero metrics, for a failed case."""
        gw = self.gw
        if not gw or not gw.alive():
            return
        try:
            metrics = [line for line in gw.ctl("metrics").stdout.splitlines()
                       if line.startswith("sluice_dpdk_") and not line.endswith(" 0")]
        except Failure as e:
            metrics = [f"(sluicectl metrics failed: {e})"]
        try:
            st = gw.status()
            status = json.dumps({k: st.get(k) for k in ("sessions", "nodes_up", "dataplane")})
        except Failure as e:
            status = f"(sluicectl status failed: {e})"
        lines = gw.log_text().splitlines(True)
        routed = [line for line in lines if "event=session_routed" in line]
        others = [line for line in lines if "level=debug" not in line]
        print("sluiced log (tail, info and above):\n" + "".join(others[-30:])
              + "routing decisions (the last 60):\n" + "".join(routed[-60:])
              + "engine metrics (non-zero):\n" + "\n".join(metrics) + "\nstatus: " + status,
              file=sys.stderr, flush=True)

    def cleanup(self):
        if self.sink:
            self.sink.stop()
        self.queues = [q for q in self.queues if not q.endswith(("bulk", "lossy", "replay"))]
        super().cleanup()


class Terminated(Exception):
    """SIGTERM (meson's timeout): not a case's Failure, so no further case runs."""


def diagnostics(topo):
    """Addresses, routes and links of every namespace, for a failed run."""
    out = []
    for ns in topo.namespaces:
        for what in (("addr",), ("route",), ("neigh",)):
            p = run(IP, *what, ns=ns, check=False)
            out.append(f"--- {ns}: ip {' '.join(what)}\n{p.stdout}{p.stderr}")
    return "\n".join(out)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    sluiced, sluicectl, sluice_load = sys.argv[1:]
    # A test that cannot run fails (CI has every resource): no skips.
    if os.geteuid() != 0:
        print("FAILED: needs root (network namespaces, DPDK af_packet and tap ports)",
              file=sys.stderr)
        return 1

    from rabbit_cluster import ClusterError, private_cluster
    work = tempfile.mkdtemp(prefix="sluice-dpdk-")
    topo = Topology()
    run_ = None
    ok = False

    def on_sigterm(signum, frame):
        # meson's timeout: unwind through the finally blocks below, which end every process
        # and delete the namespaces in order (the handlers that netns_util and rabbit_cluster
        # install are for exits that bypass them).
        raise Terminated(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        try:
            topo.create()
            say(f"namespaces {', '.join(topo.namespaces)}")
            cluster = private_cluster(nodes=2, timeout_s=CLUSTER_START_S,
                                      node_netns=[topo.n, topo.n2],
                                      node_addresses=list(Topology.NODE_IPS[:2]),
                                      stomp_addresses=list(NODE_ADDRESSES))
            signal.signal(signal.SIGTERM, on_sigterm)  # again: ours first, see above
            run_ = Run(sluiced, sluicectl, sluice_load, cluster, topo, work)
            run_.run()
            ok = True
        except (Failure, NetnsError, ClusterError, Terminated) as e:
            print(f"FAILED: {e}", file=sys.stderr)
            if run_ and run_.gw:
                print("sluiced log (tail):\n" + run_.gw.log_tail(80), file=sys.stderr)
            if run_ and run_.sink:
                print(f"sink reports: {run_.sink.reports()}", file=sys.stderr)
            print(diagnostics(topo), file=sys.stderr)
        finally:
            # Clean-up runs to its end (each step is bounded); a handler, not SIG_IGN, which
            # the commands run during clean-up would inherit.
            signal.signal(signal.SIGTERM, lambda signum, frame: None)
            if run_:
                try:
                    if run_.gw:
                        run_.gw.stop()
                except Failure as e:
                    print(f"FAILED: {e}", file=sys.stderr)
                    ok = False
                try:
                    run_.cleanup()
                except Exception as e:  # noqa: BLE001 - reported; the rest still cleaned up
                    print(f"FAILED cleanup: {e}", file=sys.stderr)
                run_.cluster.stop()
    finally:
        for problem in topo.delete():
            print(f"FAILED: {problem}", file=sys.stderr)
            ok = False
        shutil.rmtree(work, ignore_errors=True)
    if ok:
        print("dpdk_gateway: ok")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
