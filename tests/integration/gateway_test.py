#!/usr/bin/python3
"""sluiced's io_uring engine end to end, in front of a real two-node RabbitMQ cluster:

(a) queues placed by Sluice are created on the RabbitMQ node Sluice chose, and messages flow
    both ways through the gateway;
(b) queues that already exist on a node are learned from the management API, and sessions
    through the gateway reach that node;
(c) the owner stopped: producers keep getting receipts from the spill log, a consumer gets
    ERROR "owner unavailable, retry later"; the owner back: producers are told "owner
    available, reconnect", and every receipted message is delivered once, in producer order;
(d) sluiced killed with SIGKILL while spilling and restarted on the same state: every receipted
    message is delivered once the owner is back;
(k) heart-beats negotiated end to end: a client that stops beating is closed by the gateway in
    the prelude within twice its interval, and by RabbitMQ once spliced, as directly;
(e) STOMP 1.0, 1.1 and 1.2 clients, CRLF frames, binary bodies with content-length, receipts on
    every frame type, and a node's ERROR on bad credentials forwarded byte for byte at CONNECT.
The gateway of (a), (b), (e) and the reload case parks every idle spliced session
(limits.park_sessions_above = 0); each case checks that sessions were parked and unparked.

Usage: gateway_test.py SLUICED SLUICECTL
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER (tools/dev/test starts one for the
whole run) or starts a private one. Nodes stopped here are always started again.
"""

import contextlib
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_util import (Failure, RawStomp, Sluiced, add_spill_user, base_config,  # noqa: E402
                          check, close_quietly, cluster_nodes, connect_frame, consume,
                          delete_queues_quietly,
                          disconnect_with_receipt, frame, free_port, raw_connected, run_main,
                          say, send_receipted, sluice_node_index, stomp_client, wait_until)

PREFIX = "sluice-gw-%d-" % os.getpid()
PLACED_QUEUES = 8  # (a): enough that both nodes get some (more are added if not)
PLACED_QUEUES_MAX = 24
MESSAGES = 5
PRODUCER_SECONDS_DOWN = 3.0  # (c): producing while the owner is down
PRODUCER_SECONDS_AFTER = 2.0  # (c): producing after every producer was told to reconnect
PRODUCER_MESSAGES_MAX = 2000
HEARTBEAT_BOUND_S = 15  # a client that stopped its heart-beats must be closed by then
PRODUCER_INTERVAL_S = 0.02  # between two SENDs: about 50 per second per producer
RECEIPT_TIMEOUT_S = 10
DRAIN_TIMEOUT_S = 60
CONSUME_TIMEOUT_S = 30


class Run:
    gw_host = "127.0.0.1"  # where clients reach sluiced (the DPDK test: its virtual IP)

    def __init__(self, sluiced, sluicectl, cluster, work):
        self.sluiced, self.sluicectl, self.cluster, self.work = sluiced, sluicectl, cluster, work
        self.login, self.passcode = cluster.login, cluster.passcode
        self.gw = None
        self.queues = []  # created in RabbitMQ: deleted at the end
        self.stopped_nodes = set()

    # -- helpers -----------------------------------------------------------------------------

    def queue_name(self, suffix):
        q = PREFIX + suffix
        self.queues.append(q)
        return q

    def start_gateway(self, name, config):
        work = os.path.join(self.work, name)
        os.makedirs(work, exist_ok=True)
        port = free_port()
        text = base_config(name, work, port, self.cluster, **config(work))
        self.gw = Sluiced(self.sluiced, self.sluicectl, work, text, port).start()
        return self.gw

    def check_parked_session(self):
        """An idle spliced session shows as parked in `sluicectl status`, and still works."""
        q = self.queue_name("parked")
        before = self.gw.status()["sessions"]["parked"]  # sessions of earlier cases still open
        r = raw_connected(self.gw.port, self.login, self.passcode)
        try:
            r.send(frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "s1"),
                                       ("receipt", "r-sub")]))
            f = r.read_frame()
            check(f is not None and f.command == "RECEIPT", f"expected RECEIPT, got {f}")
            wait_until("the idle session parked", 10,
                       lambda: self.gw.status()["sessions"]["parked"] == before + 1)
            rows = [s for s in self.gw.ctl_json("sessions")["sessions"] if s["queue"] == q]
            check(len(rows) == 1 and rows[0]["state"] == "spliced" and rows[0]["parked"],
                  f"sluicectl sessions for the parked session: {rows}")
            table = self.gw.ctl("sessions").stdout
            check(any(q in line and "spliced/parked" in line for line in table.splitlines()),
                  f"sluicectl sessions shows no parked row for {q}:\n{table}")
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r-send")],
                         b"after parking"))
            got = []
            deadline = time.monotonic() + 10
            while len(got) < 2 and time.monotonic() < deadline:
                f = r.read_frame(timeout_s=max(0.1, deadline - time.monotonic()))
                check(f is not None, f"closed early after {got}")
                got.append(f)
            commands = sorted(f.command for f in got)
            check(commands == ["MESSAGE", "RECEIPT"], f"after unparking: {got}")
            body = next(f.body for f in got if f.command == "MESSAGE")
            check(body == b"after parking", f"message body {body!r}")
        finally:
            r.close()
        say("ok: an idle spliced session parked (sluicectl status and sessions) and unparked "
            "for a SEND")

    def metric_sum(self, name):
        """The sum of a metric's samples over its labels (workers), from `sluicectl metrics`."""
        total = 0.0
        for line in self.gw.ctl("metrics").stdout.splitlines():
            key, _, value = line.rpartition(" ")
            if key == name or key.startswith(name + "{"):
                total += float(value)
        return total

    def stop_gateway(self):
        if self.gw:
            gw, self.gw = self.gw, None
            gw.stop()

    def stop_node(self, i):
        self.stopped_nodes.add(i)
        self.cluster.stop_app(i)

    def start_node(self, i):
        self.cluster.start_app(i)
        self.stopped_nodes.discard(i)

    def restore_nodes(self):
        for i in sorted(self.stopped_nodes):
            try:
                self.start_node(i)
            except Exception as e:  # noqa: BLE001 - reported, and the next node still started
                print(f"FAILED to start node {i} again: {e}", file=sys.stderr)

    def rabbit_home(self, queue):
        info = self.cluster.queue("/", queue) or {}
        return self.cluster.queue_home(info)

    def consumer_nodes(self, queue):
        info = self.cluster.queue("/", queue) or {}
        nodes = []
        for d in info.get("consumer_details") or []:
            details = d.get("channel_details")
            # Empty ([]) until the channel's statistics reach the management database.
            if not isinstance(details, dict) or not details.get("node"):
                return []
            nodes.append(details["node"])
        return nodes

    def owner_of(self, queue):
        rec = self.gw.queues().get(("/", queue))
        check(rec is not None, f"queue {queue} not in sluicectl queues: {self.gw.queues()}")
        return rec

    # -- (a) placed ---------------------------------------------------------------------------

    def case_placed(self):
        gw = self.gw
        per_node = {}
        queues = []
        n = 0
        while n < PLACED_QUEUES_MAX and (n < PLACED_QUEUES or len(per_node) < 2):
            q = self.queue_name(f"a{n}")
            n += 1
            c, lis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
            try:
                send_receipted(c, lis, "/queue/" + q, [f"{q}-{i}" for i in range(MESSAGES)])
            finally:
                close_quietly(c)
            rec = self.owner_of(q)
            check(rec["source"] in ("placed", "learned") and rec["placed"] == rec["node"],
                  f"queue {q}: expected a placed owner, got {rec}")
            idx = sluice_node_index(rec["node"])
            want = self.cluster.nodes[idx]["name"]
            home = wait_until(f"queue {q} in the management API", 10, lambda: self.rabbit_home(q))
            check(home == want, f"queue {q}: Sluice placed it on {rec['node']} ({want}) but "
                  f"RabbitMQ created it on {home}")
            per_node.setdefault(rec["node"], []).append(q)
            queues.append(q)
        check(len(per_node) == 2, f"{n} queues all placed on one node: {per_node}")

        # The other way: a consumer through sluiced gets each queue's messages, and its
        # subscription sits on the owner node (all at once: the management API shows a
        # consumer's node only after its channel's first statistics, a few seconds).
        consumers = []
        try:
            for q in queues:
                c, lis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
                consumers.append((q, c, lis))
                c.subscribe(destination="/queue/" + q, id="1", ack="auto")
            for q, c, lis in consumers:
                want = self.cluster.nodes[sluice_node_index(self.owner_of(q)["node"])]["name"]
                wait_until(f"{MESSAGES} messages of {q}", 10,
                           lambda: len(lis.bodies()) >= MESSAGES or lis.errors)
                check(lis.bodies() == [f"{q}-{i}" for i in range(MESSAGES)] and not lis.errors,
                      f"consumer of {q} got {lis.bodies()}, errors {lis.errors}")
                nodes = wait_until(f"the consumer of {q} in the management API", 15,
                                   lambda: self.consumer_nodes(q))
                check(nodes == [want], f"consumer of {q} through sluiced is on {nodes}, "
                      f"the owner is {want}")
        finally:
            for _, c, _ in consumers:
                close_quietly(c)
        gw.wait_idle()
        say(f"ok (a): {len(queues)} placed queues created on the chosen node "
            f"({ {k: len(v) for k, v in per_node.items()} }), messages both ways")

    # -- SIGHUP with sessions open ------------------------------------------------------------

    def case_reload(self):
        """SIGHUP reloads the config; a spliced session keeps flowing through it."""
        gw = self.gw
        q = self.queue_name("h")
        c, lis = stomp_client(gw.port, self.login, self.passcode)
        try:
            c.subscribe(destination="/queue/" + q, id="1", ack="auto")

            def spliced_session():
                rows = [r for r in gw.ctl_json("sessions")["sessions"]
                        if r["queue"] == q and r["state"] == "spliced"]
                return rows[0]["id"] if rows else None
            sid = wait_until(f"the consumer of {q} spliced", 10, spliced_session)
            reloads = gw.log_text().count("event=config_reloaded")
            os.kill(gw.proc.pid, signal.SIGHUP)
            wait_until("the reload", 10,
                       lambda: gw.log_text().count("event=config_reloaded") > reloads)
            p, plis = stomp_client(gw.port, self.login, self.passcode)
            try:
                send_receipted(p, plis, "/queue/" + q, [f"{q}-{i}" for i in range(MESSAGES)])
            finally:
                close_quietly(p)
            wait_until(f"{MESSAGES} messages after the reload", 10,
                       lambda: len(lis.bodies()) >= MESSAGES or lis.errors)
            check(lis.bodies() == [f"{q}-{i}" for i in range(MESSAGES)] and not lis.errors,
                  f"consumer across the reload got {lis.bodies()}, errors {lis.errors}")
            check(spliced_session() == sid, "the consumer's session changed across the reload")
        finally:
            close_quietly(c)
        gw.wait_idle()
        say("ok (h): SIGHUP reload with a spliced session open; it kept flowing")

    # -- (b) learned --------------------------------------------------------------------------

    def case_learned(self):
        gw = self.gw
        learned = {}
        for i, node in enumerate(self.cluster.nodes):
            q = self.queue_name(f"b{i}")
            # Created directly on node i by RabbitMQ's STOMP (a durable queue on SUBSCRIBE).
            c, lis = stomp_client(node["stomp_port"], self.login, self.passcode)
            try:
                c.subscribe(destination="/queue/" + q, id="1", ack="auto")
                wait_until(f"queue {q} on {node['name']}", 10, lambda: self.rabbit_home(q))
            finally:
                close_quietly(c)
            check(self.rabbit_home(q) == node["name"],
                  f"queue {q} created through {node['name']} is on {self.rabbit_home(q)}")
            learned[q] = f"rabbit{i + 1}"

        def all_learned():
            got = gw.queues()
            return all(got.get(("/", q), {}).get("learned") == n for q, n in learned.items())
        try:
            wait_until("the feed to learn the queues", 15, all_learned, interval_s=0.2)
        except Failure:
            raise Failure(f"feed did not learn {learned}: {gw.queues()}; "
                          f"status: {gw.status()['feed']}")

        for q, n in learned.items():
            want = self.cluster.nodes[sluice_node_index(n)]["name"]
            c, lis = stomp_client(gw.port, self.login, self.passcode)
            try:
                c.subscribe(destination="/queue/" + q, id="1", ack="auto")
                nodes = wait_until(f"the consumer of {q} in the management API", 10,
                                   lambda: self.consumer_nodes(q))
                check(nodes == [want], f"consumer of learned {q} through sluiced is on {nodes}, "
                      f"the queue is on {want}")
                sessions = gw.ctl_json("sessions")["sessions"]
                check(any(s.get("owner") == n for s in sessions),
                      f"sluicectl sessions shows no session to {n}: {sessions}")
                p, plis = stomp_client(gw.port, self.login, self.passcode)
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
            rec = self.owner_of(q)
            check(rec["source"] == "learned" and rec["node"] == n and rec["placed"] is None,
                  f"learned queue {q}: {rec}")
        gw.wait_idle()
        say(f"ok (b): queues created on each node learned ({learned}); sessions reach them")

    # -- (e) protocol -------------------------------------------------------------------------

    def case_protocol(self):
        gw = self.gw
        # STOMP 1.0, 1.1, 1.2 through stomp.py.
        for v in ("1.0", "1.1", "1.2"):
            q = self.queue_name("e-v" + v.replace(".", ""))
            c, lis = stomp_client(gw.port, self.login, self.passcode, version=v)
            try:
                send_receipted(c, lis, "/queue/" + q, [f"{v}-{i}" for i in range(MESSAGES)])
            finally:
                close_quietly(c)
            bodies, errors = consume(gw.port, self.login, self.passcode, "/queue/" + q,
                                     MESSAGES, version=v, timeout_s=10)
            check(bodies == [f"{v}-{i}" for i in range(MESSAGES)] and not errors,
                  f"STOMP {v}: consumer got {bodies}, errors {errors}")
        say("ok (e): STOMP 1.0, 1.1 and 1.2 clients send and receive through sluiced")

        # CRLF line ends everywhere, and a binary body (every byte value, NULs included) with
        # content-length.
        q = self.queue_name("e-crlf")
        body = bytes(range(256)) * 4
        r = raw_connected(gw.port, self.login, self.passcode, eol=b"\r\n")
        try:
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r-send"),
                                  ("content-type", "application/octet-stream")],
                         body, eol=b"\r\n", content_length=True))
            f = r.read_frame()
            check(f and f.command == "RECEIPT" and f.headers.get("receipt-id") == "r-send",
                  f"CRLF SEND: expected RECEIPT r-send, got {f}")
            r.send(frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "s1"),
                                       ("ack", "auto"), ("receipt", "r-sub")], eol=b"\r\n"))
            got = [r.read_frame(), r.read_frame()]
            cmds = sorted(x.command for x in got if x)
            check(cmds == ["MESSAGE", "RECEIPT"], f"CRLF SUBSCRIBE: got {got}")
            msg = [x for x in got if x.command == "MESSAGE"][0]
            diff = next((i for i, (a, b) in enumerate(zip(msg.body, body)) if a != b), None)
            check(msg.body == body, f"binary body changed: {len(msg.body)} bytes, "
                  f"first difference at {diff}")
            disconnect_with_receipt(r, "r-disc", "CRLF DISCONNECT", eol=b"\r\n")
        finally:
            r.close()
        say("ok (e): CRLF frames and a 1 KiB binary body (bytes 0..255) with content-length")

        # Receipts on every frame type, before the destination (buffered and replayed) and
        # after (spliced): RabbitMQ answers them all through the gateway.
        q = self.queue_name("e-receipts")
        r = raw_connected(gw.port, self.login, self.passcode)
        try:
            r.send(frame("BEGIN", [("transaction", "t1"), ("receipt", "r-begin")]))
            r.send(frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "s1"),
                                       ("ack", "client-individual"), ("receipt", "r-sub")]))
            r.send(frame("SEND", [("destination", "/queue/" + q), ("transaction", "t1"),
                                  ("receipt", "r-send-tx")], b"in-tx", content_length=True))
            r.send(frame("COMMIT", [("transaction", "t1"), ("receipt", "r-commit")]))
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r-send")],
                         b"plain"))
            receipts, messages = [], []
            deadline = time.monotonic() + 10
            while (len(receipts) < 5 or len(messages) < 2) and time.monotonic() < deadline:
                f = r.read_frame(timeout_s=max(0.1, deadline - time.monotonic()))
                check(f is not None, f"closed early; receipts {receipts}, messages {messages}")
                check(f.command in ("RECEIPT", "MESSAGE"), f"unexpected frame {f}")
                (receipts if f.command == "RECEIPT" else messages).append(f)
            rids = [f.headers["receipt-id"] for f in receipts]
            # RabbitMQ answers a transactional SEND's receipt at COMMIT, in either order.
            check(rids[:2] == ["r-begin", "r-sub"] and rids[-1] == "r-send"
                  and sorted(rids[2:4]) == ["r-commit", "r-send-tx"], f"receipts {rids}")
            check([m.body for m in messages] == [b"in-tx", b"plain"],
                  f"messages {[m.body for m in messages]}")
            for i, m in enumerate(messages):
                r.send(frame("ACK", [("id", m.headers["ack"]), ("receipt", f"r-ack{i}")]))
            r.send(frame("UNSUBSCRIBE", [("id", "s1"), ("receipt", "r-unsub")]))
            r.send(frame("DISCONNECT", [("receipt", "r-disc")]))
            rids = []
            for _ in range(4):
                f = r.read_frame()
                check(f is not None and f.command == "RECEIPT", f"expected RECEIPT, got {f}")
                rids.append(f.headers["receipt-id"])
            check(rids == ["r-ack0", "r-ack1", "r-unsub", "r-disc"], f"receipts {rids}")
            rest = r.wait_closed()
            check(rest == b"", f"bytes after the DISCONNECT receipt: {rest!r}")
        finally:
            r.close()
        # DISCONNECT before any destination: the gateway answers it.
        r = raw_connected(gw.port, self.login, self.passcode)
        try:
            disconnect_with_receipt(r, "r-early", "DISCONNECT in prelude")
        finally:
            r.close()
        say("ok (e): receipts for BEGIN, SUBSCRIBE, SEND, COMMIT, ACK, UNSUBSCRIBE, DISCONNECT "
            "(prelude and spliced)")

        # Bad credentials: the login check's node answers the CONNECT with its ERROR, which
        # reaches the client byte for byte and at once (login_check eager); the SEND behind it
        # never reaches a node. The same frames straight to the owner give the reference.
        q = self.queue_name("e-badcreds")
        c, lis = stomp_client(gw.port, self.login, self.passcode)  # places q; the owner is up
        try:
            send_receipted(c, lis, "/queue/" + q, ["x"])
        finally:
            close_quietly(c)
        owner = self.cluster.nodes[sluice_node_index(self.owner_of(q)["node"])]
        frames = (connect_frame(self.login, "wrong-" + self.passcode)
                  + frame("SEND", [("destination", "/queue/" + q), ("receipt", "r1")], b"bad"))

        def exchange(port, through_gateway):
            r = RawStomp(port)
            try:
                # Straight to RabbitMQ, CONNECT alone: it would answer the SEND too.
                r.send(frames if through_gateway else frames[:frames.index(b"\0") + 1])
                f = r.read_frame()
                check(f and f.command == "ERROR", f"bad credentials on port {port}: got {f}")
                if through_gateway:  # RabbitMQ itself takes 10 s to close
                    rest = r.wait_closed()
                    check(rest == b"", f"bytes after the ERROR: {rest!r}")
                return f
            finally:
                r.close()
        direct = exchange(owner["stomp_port"], False)
        via = exchange(gw.port, True)
        check(via.raw == direct.raw, f"owner ERROR changed on the way: direct {direct.raw!r}, "
              f"through sluiced {via.raw!r}")
        gw.wait_idle()
        say(f"ok (e): bad credentials: the owner's ERROR (message: "
            f"{via.headers.get('message')!r}) forwarded byte for byte")

    # -- (k) heart-beats -------------------------------------------------------------------------

    def silent_after(self, r, what):
        """Reads from r until EOF (bounded): (seconds from now to the close, bytes read)."""
        t0 = time.monotonic()
        got = b""
        deadline = t0 + HEARTBEAT_BOUND_S
        while not r.eof:
            check(time.monotonic() < deadline,
                  f"{what}: still open {HEARTBEAT_BOUND_S} s after the client fell silent")
            r._fill(deadline)
            got += r.buf
            r.buf = b""
        return time.monotonic() - t0, got

    def case_heart_beats(self):
        """heart-beat 1000,1000 negotiated end to end; a client that stops beating is closed by
        the gateway in the prelude (twice its interval) and by the owner once spliced."""
        gw = self.gw
        beating = connect_frame(self.login, self.passcode).replace(b"heart-beat:0,0",
                                                                   b"heart-beat:1000,1000")
        ends = 'sluice_prelude_ends_total{reason="heartbeat_timeout"}'
        before = self.metric_sum(ends)
        # Prelude: CONNECTED (the node's, heart-beat 1000,1000), then silence from the client.
        r = RawStomp(gw.port)
        try:
            r.send(beating)
            f = r.read_frame()
            check(f and f.command == "CONNECTED" and f.headers.get("heart-beat") == "1000,1000",
                  f"heart-beats: expected CONNECTED with heart-beat 1000,1000, got {f}")
            prelude_took, got = self.silent_after(r, "a silent client in the prelude")
        finally:
            r.close()
        check(b"message:heart-beat timeout" in got and got.count(b"\n\n") >= 1,
              f"a silent client in the prelude got {got!r}")
        beats = len(got) - len(got.lstrip(b"\n"))
        check(beats >= 1, f"no heart-beat from the gateway before the close: {got!r}")
        check(1.5 <= prelude_took <= 2.5, f"the prelude closed a silent client after "
              f"{prelude_took:.1f} s (its interval 1 s, grace 2 s)")
        check(self.metric_sum(ends) == before + 1, "the prelude's heartbeat_timeout end")
        # Spliced: the owner's own heart-beats pass through, and the owner closes a client that
        # stopped sending its own, as it does directly.
        q = self.queue_name("k-beats")
        sub = frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "s1"),
                                  ("receipt", "r-sub")])
        closes = {}
        for side, port in (("direct", self.cluster.nodes[0]["stomp_port"]), ("through", gw.port)):
            r = RawStomp(port)
            try:
                r.send(beating + sub)
                f = r.read_frame()
                check(f and f.command == "CONNECTED", f"{side}: expected CONNECTED, got {f}")
                f = r.read_frame()
                check(f and f.command == "RECEIPT", f"{side}: expected the RECEIPT, got {f}")
                closes[side] = self.silent_after(r, f"a silent spliced client ({side})")
            finally:
                r.close()
        for side, (took, got) in closes.items():
            check(got.count(b"\n") >= 1 and took >= 1.0,
                  f"{side}: closed after {took:.1f} s with {got!r}")
        check(self.metric_sum(ends) == before + 1,
              "the gateway closed a spliced session for heart-beats: the owner must")
        say(f"ok (k): heart-beat 1000,1000 end to end; a silent client closed by the gateway "
            f"{prelude_took:.1f} s into the prelude; spliced, by RabbitMQ after "
            f"{closes['through'][0]:.1f} s (directly {closes['direct'][0]:.1f} s)")

    # -- (c) owner down and back --------------------------------------------------------------

    @contextlib.contextmanager
    def owner_down(self, q):
        """Places q and creates it on its owner, then stops the owner until the block ends (once
        sluiced sees it down). Yields the owner's name."""
        gw = self.gw
        c, lis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
        try:
            c.subscribe(destination="/queue/" + q, id="1", ack="auto")
            wait_until(f"queue {q} in RabbitMQ", 10, lambda: self.rabbit_home(q))
        finally:
            close_quietly(c)
        gw.wait_idle()
        owner = self.owner_of(q)["node"]
        idx = sluice_node_index(owner)
        self.stop_node(idx)
        try:
            wait_until(f"sluiced to see {owner} down", 10,
                       lambda: gw.node_health(owner) == "down")
            yield owner
        finally:
            self.start_node(idx)

    def case_owner_down(self):
        gw = self.gw
        q = self.queue_name("c")
        with self.owner_down(q) as owner:
            # A consumer: ERROR, then close.
            c, lis = stomp_client(gw.port, self.login, self.passcode, host=self.gw_host)
            try:
                c.subscribe(destination="/queue/" + q, id="1", ack="auto", receipt="r-sub")
                wait_until("the consumer's ERROR", 10, lambda: lis.errors)
                check(lis.error_messages() == ["owner unavailable, retry later"],
                      f"consumer with the owner down got {lis.errors}")
                wait_until("the consumer's session to close", 10, lis.disconnected.is_set)
            finally:
                close_quietly(c)

            producers = [Producer(gw.port, self.login, self.passcode, q, name,
                                  host=self.gw_host) for name in ("A", "B")]
            for p in producers:
                p.start()
            time.sleep(PRODUCER_SECONDS_DOWN)
            for p in producers:
                check(p.confirmed and not p.failure,
                      f"producer {p.name} with the owner down: {len(p.confirmed)} receipts, "
                      f"errors {p.error_messages}, failure {p.failure}")
            spilled = {p.name: len(p.confirmed) for p in producers}
        try:
            try:
                wait_until("every producer to be told to reconnect", 20,
                           lambda: all("owner available, reconnect" in p.error_messages
                                       for p in producers) or any(p.failure for p in producers))
            except Failure as e:
                raise Failure(f"{e}: " + "; ".join(p.describe() for p in producers)
                              + f"; sessions: {gw.ctl_json('sessions')}")
            time.sleep(PRODUCER_SECONDS_AFTER)
        finally:
            for p in producers:
                p.stop()
        for p in producers:
            check(not p.failure, f"producer {p.name}: {p.failure}")
            unexpected = [m for m in p.error_messages if m != "owner available, reconnect"]
            check(not unexpected, f"producer {p.name} got ERRORs {unexpected}")
        self.wait_drained()
        self.check_delivered(q, producers)
        gw.wait_idle()
        say(f"ok (c): owner {owner} down: consumer told 'owner unavailable, retry later', "
            f"producers spilled {spilled}; back: "
            + ", ".join(f"{p.name}: {len(p.confirmed)} receipted" for p in producers)
            + ", all delivered once, in order")

    def wait_drained(self):
        gw = self.gw
        try:
            wait_until("the spill backlog to drain", DRAIN_TIMEOUT_S,
                       lambda: gw.ctl_json("spill")["messages"] == 0, interval_s=0.3)
        except Failure:
            raise Failure(f"spill not drained: {gw.ctl_json('spill')}")

    def check_delivered(self, q, producers):
        confirmed = sum(len(p.confirmed) for p in producers)
        bodies, errors = consume(self.gw.port, self.login, self.passcode, "/queue/" + q,
                                 confirmed, timeout_s=CONSUME_TIMEOUT_S, quiet_s=1.0,
                                 host=self.gw_host)
        check(not errors, f"consumer after the owner came back got {errors}")
        dups = sorted({b for b in bodies if bodies.count(b) > 1})
        check(not dups, f"delivered more than once: {dups[:10]}")
        for p in producers:
            mine = [b for b in bodies if b.startswith(p.name + "-")]
            seqs = [int(b.split("-")[1]) for b in mine]
            check(seqs == sorted(seqs), f"producer {p.name}: out of order: {seqs}")
            missing = sorted(set(p.confirmed) - set(mine))
            check(not missing, f"producer {p.name}: {len(missing)} receipted messages missing: "
                  f"{missing[:10]} (delivered {len(mine)}, receipted {len(p.confirmed)})")
            extra = set(mine) - set(p.confirmed) - set(p.unconfirmed)
            check(not extra, f"producer {p.name}: delivered messages never sent: {extra}")
        others = [b for b in bodies if b.split("-")[0] not in {p.name for p in producers}]
        check(not others, f"unexpected bodies {others[:10]}")

    # -- (d) kill -9 while spilling -----------------------------------------------------------

    def case_kill9(self):
        gw = self.gw
        q = self.queue_name("d")
        with self.owner_down(q):
            p = Producer(gw.port, self.login, self.passcode, q, "K", reconnect=False)
            p.start()
            wait_until("50 receipts from the spill log", 20,
                       lambda: len(p.confirmed) >= 50 or p.failure or p.done.is_set())
            check(not p.failure and len(p.confirmed) >= 50,
                  f"producer before kill -9: {len(p.confirmed)} receipts, {p.failure}, "
                  f"{p.error_messages}")
            gw.kill9()
            p.stop()
            say(f"    kill -9 of sluiced after {len(p.confirmed)} receipts "
                f"({len(p.unconfirmed)} unconfirmed)")
            gw.start()
            log = gw.log_text()
            check("event=spill_recovered" in log, "no spill_recovered line after restart")
            backlog = gw.ctl_json("spill")["messages"]
            check(backlog >= len(p.confirmed),
                  f"after restart the spill log holds {backlog} messages, "
                  f"{len(p.confirmed)} were receipted")
        self.wait_drained()
        self.check_delivered(q, [p])
        gw.wait_idle()
        say(f"ok (d): kill -9 while spilling: {len(p.confirmed)} receipted messages recovered "
            f"and delivered once, in order")

    # -- run ----------------------------------------------------------------------------------

    def run(self):
        times = {}
        nodes = cluster_nodes(self.cluster)
        feed = f"""
[feed.rabbitmq]
enabled = true
urls = ["{self.cluster.mgmt_url(0)}", "{self.cluster.mgmt_url(1)}"]
login = "{self.login}"
passcode_file = "{self.cluster.passcode_file}"
interval_ms = 500
timeout_ms = 400
"""
        # $SLUICE_GW_CASES (e.g. "cd") runs some of the cases only, to debug one.
        selected = os.environ.get("SLUICE_GW_CASES", "abhekcd")
        t = time.monotonic()
        direct = [(n, c) for n, c in (("a", self.case_placed), ("b", self.case_learned),
                                      ("h", self.case_reload), ("e", self.case_protocol),
                                      ("k", self.case_heart_beats))
                  if n in selected]
        if direct:
            # Every idle spliced session is parked (limits.park_sessions_above = 0), so that
            # these cases also run each spliced session through parking and unparking.
            self.start_gateway("gw-direct", lambda work: {
                "nodes": nodes, "spill": "allow_anonymous = true", "extra": feed,
                "limits": "park_sessions_above = 0"})
            for name, case in direct:
                t0 = time.monotonic()
                case()
                times[name] = time.monotonic() - t0
            self.check_parked_session()
            parks, unparks, failed = (self.metric_sum(f"sluice_splice_{m}")
                                      for m in ("parks_total", "unparks_total",
                                                "unpark_failed_total"))
            check(parks > 0 and unparks > 0 and failed == 0,
                  f"parking: {parks:.0f} parks, {unparks:.0f} unparks, {failed:.0f} failed")
            say(f"parking: {parks:.0f} parks, {unparks:.0f} unparks")
            self.stop_gateway()

        def spill_config(work):
            users = os.path.join(work, "spill-users")
            # Spill sessions log in with the same credentials the owner takes directly.
            add_spill_user(self.sluicectl, users, self.login, self.passcode,
                           [f"/:{PREFIX}*"], work)
            return {"nodes": nodes, "spill": f'users_file = "{users}"'}
        spill = [(n, c) for n, c in (("c", self.case_owner_down), ("d", self.case_kill9))
                 if n in selected]
        if spill:
            self.start_gateway("gw-spill", spill_config)
            for name, case in spill:
                t0 = time.monotonic()
                case()
                times[name] = time.monotonic() - t0
            self.stop_gateway()
        say("times: " + ", ".join(f"({k}) {v:.1f} s" for k, v in times.items())
            + f", total {time.monotonic() - t:.1f} s")

    def cleanup(self):
        self.restore_nodes()
        delete_queues_quietly(self.cluster, self.queues)


class Producer(threading.Thread):
    """Sends NAME-SEQ with a receipt, one at a time; on ERROR or a closed session reconnects
    (when allowed) and goes on with the next sequence number."""

    def __init__(self, port, login, passcode, queue, name, reconnect=True, host="127.0.0.1"):
        super().__init__(daemon=True)
        self.port, self.login, self.passcode, self.queue = port, login, passcode, queue
        self.host = host
        self.name, self.reconnect = name, reconnect
        self.confirmed, self.unconfirmed, self.error_messages = [], [], []
        self.failure = None
        self.stopping = threading.Event()
        self.done = threading.Event()

    def run(self):
        c = None
        seq = 0
        try:
            connects = 0
            while not self.stopping.is_set() and seq < PRODUCER_MESSAGES_MAX:
                if c is None:
                    if connects and not self.reconnect:
                        return
                    connects += 1
                    if connects > 50:
                        self.failure = "more than 50 reconnects"
                        return
                    try:
                        c, lis = stomp_client(self.port, self.login, self.passcode, timeout_s=5,
                                              host=self.host)
                    except Exception as e:  # noqa: BLE001 - retried, bounded
                        if not self.reconnect:
                            return
                        time.sleep(0.2)
                        c = None
                        self.error_messages.append(f"connect: {e}")
                        continue
                body = f"{self.name}-{seq}"
                try:
                    c.send(destination="/queue/" + self.queue, body=body, receipt=body)
                except Exception:  # noqa: BLE001 - the session went away
                    ok = False
                else:
                    ok = lis.wait_receipt(body, RECEIPT_TIMEOUT_S)
                (self.confirmed if ok else self.unconfirmed).append(body)
                seq += 1
                time.sleep(PRODUCER_INTERVAL_S)
                if not ok:
                    self.error_messages.extend(lis.error_messages())
                    if not lis.errors and not lis.disconnected.is_set() and \
                            not self.stopping.is_set():
                        self.failure = f"no RECEIPT {body} within {RECEIPT_TIMEOUT_S} s"
                        return
                    close_quietly(c)
                    c = None
        finally:
            if c is not None:
                close_quietly(c)
            self.done.set()

    def describe(self):
        return (f"producer {self.name}: {len(self.confirmed)} receipted, unconfirmed "
                f"{self.unconfirmed}, errors {self.error_messages}, failure {self.failure}, "
                f"{'running' if self.is_alive() else 'ended'}")

    def stop(self):
        self.stopping.set()
        self.join(RECEIPT_TIMEOUT_S + 10)
        if self.is_alive():
            self.failure = self.failure or "producer thread did not stop"


def main():
    return run_main(__doc__, "sluice-gw-", "gateway", Run)


if __name__ == "__main__":
    sys.exit(main())
