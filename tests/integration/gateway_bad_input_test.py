#!/usr/bin/python3
"""sluiced's io_uring engine against bad input, in front of a real two-node RabbitMQ cluster:
random bytes, an HTTP request, a prelude over prelude_bytes_max, a slow-loris prelude, 10,000
idle connections (and the prelude_sessions_max refusal), a client that resets mid-splice, an
owner that accepts and never answers, and 10,000 sessions with a wrong passcode each naming a
new queue (the ownership table and its state file stay as they were). After each: sluicectl status answers, the session
count returns to 0, and a well-behaved session (run while the bad one is still open where it
can be) completes.

Usage: gateway_bad_input_test.py SLUICED SLUICECTL
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER or starts a private one.
"""

import os
import random
import resource
import selectors
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_util import (Failure, RawStomp, Sluiced, base_config, check,  # noqa: E402
                          close_quietly, cluster_nodes, connect_frame, consume,
                          delete_queues_quietly, frame,
                          free_port, node_section, pin_section, raw_connected, run_main, say,
                          send_receipted, stomp_client, wait_until)

PREFIX = "sluice-gwbad-%d-" % os.getpid()
PRELUDE_BYTES_MAX = 4096
FRAME_TIMEOUT_MS = 1000
CONNECT_TIMEOUT_MS = 1000
IDLE_SESSIONS = 10000
WRONG_LOGINS = 10000
WRONG_LOGINS_AT_ONCE = 64  # sessions open at once in that case
WRONG_LOGINS_BOUND_S = 240
WRONG_LOGINS_CONNECT_TIMEOUT_MS = 10000
STATE_SAVE_SETTLE_S = 1.5  # control writes the state file within a second of a change
OUTCOME_TIMEOUT_S = 15  # a bad session must have ended by then
SILENT_OWNER_BOUND_S = 10  # the silent owner: the client must hear within this


class SilentOwner(threading.Thread):
    """A 'broker' on loopback that accepts and reads, and never writes a byte."""

    def __init__(self):
        super().__init__(daemon=True)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.received = {}  # connection number -> bytes read
        self.closed_by_peer = set()
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        sel = selectors.DefaultSelector()
        self.listener.setblocking(False)
        sel.register(self.listener, selectors.EVENT_READ, None)
        conns = []
        n = 0
        while not self.stopping.is_set():
            for key, _ in sel.select(timeout=0.1):
                if key.data is None:
                    try:
                        c, _ = self.listener.accept()
                    except BlockingIOError:
                        continue
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ, n)
                    conns.append(c)
                    with self.lock:
                        self.received[n] = b""
                    n += 1
                else:
                    try:
                        data = key.fileobj.recv(65536)
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        data = b""
                    with self.lock:
                        if data:
                            self.received[key.data] += data[:4096]
                        else:
                            self.closed_by_peer.add(key.data)
                    if not data:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
        for c in conns:
            try:
                c.close()
            except OSError:
                pass
        self.listener.close()

    def stop(self):
        self.stopping.set()
        self.join(5)


class Run:
    def __init__(self, sluiced, sluicectl, cluster, work):
        self.sluiced, self.sluicectl, self.cluster, self.work = sluiced, sluicectl, cluster, work
        self.login, self.passcode = cluster.login, cluster.passcode
        self.gw = None
        self.silent = None
        self.queues = []
        self.good = PREFIX + "good"
        self.silent_queue = PREFIX + "silent"
        self.findings = []  # what each case saw (printed at the end)

    def queue_name(self, suffix):
        q = PREFIX + suffix
        self.queues.append(q)
        return q

    def well_behaved(self, label):
        """A producer and a consumer through sluiced; Failure unless both complete."""
        body = [f"{label}-{i}" for i in range(3)]
        c, lis = stomp_client(self.gw.port, self.login, self.passcode)
        try:
            send_receipted(c, lis, "/queue/" + self.good, body)
        finally:
            close_quietly(c)
        got, errors = consume(self.gw.port, self.login, self.passcode, "/queue/" + self.good, 3,
                              timeout_s=10, quiet_s=0.2)
        check(got == body and not errors,
              f"{label}: the well-behaved session got {got}, errors {errors}")

    def healthy(self, label):
        self.gw.status()
        self.gw.wait_idle()
        check(self.gw.alive(), f"sluiced exited after {label}")

    def expect_error_then_close(self, r, label, timeout_s=OUTCOME_TIMEOUT_S):
        """The documented outcome: an ERROR frame with a message header, then close."""
        t0 = time.monotonic()
        try:
            f = r.read_frame(timeout_s=timeout_s)
        except Failure as e:
            raise Failure(f"{label}: no ERROR and no close within {timeout_s} s ({e})")
        check(f is not None, f"{label}: closed without an ERROR frame")
        if f.command == "CONNECTED":  # the prelude answered a CONNECT that was part of it
            f = r.read_frame(timeout_s=timeout_s)
        check(f is not None and f.command == "ERROR" and f.headers.get("message"),
              f"{label}: expected ERROR with a message header, got {f}")
        rest = r.wait_closed(timeout_s)
        check(rest == b"", f"{label}: bytes after the ERROR: {rest!r}")
        took = time.monotonic() - t0
        self.findings.append(f"{label}: ERROR message={f.headers['message']!r} "
                             f"body={f.body[:80]!r} then close after {took:.1f} s")
        return f, took

    # -- cases --------------------------------------------------------------------------------

    def case_random_bytes(self):
        rng = random.Random(20261130)
        data = b"\x8f" + bytes(rng.randrange(256) for _ in range(4095))
        r = RawStomp(self.gw.port)
        try:
            r.send(data)
            self.well_behaved("random")
            self.expect_error_then_close(r, "random bytes")
        finally:
            r.close()
        self.healthy("random bytes")

    def case_http(self):
        r = RawStomp(self.gw.port)
        try:
            r.send(b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n")
            self.well_behaved("http")
            self.expect_error_then_close(r, "HTTP GET")
        finally:
            r.close()
        # A STOMP frame, but not CONNECT: documented as ERROR "expected CONNECT".
        r = RawStomp(self.gw.port)
        try:
            r.send(frame("SEND", [("destination", "/queue/" + self.good)], b"no connect"))
            f, _ = self.expect_error_then_close(r, "SEND before CONNECT")
            check(f.headers["message"] == "expected CONNECT", f"SEND first: {f}")
        finally:
            r.close()
        self.healthy("HTTP GET")

    def case_prelude_too_large(self):
        r = raw_connected(self.gw.port, self.login, self.passcode)
        try:
            big = "x" * 1500
            for i in range(3):  # > PRELUDE_BYTES_MAX buffered before any destination
                r.send(frame("BEGIN", [("transaction", f"t{i}"), ("pad", big)]))
            self.well_behaved("prelude-max")
            f, _ = self.expect_error_then_close(r, f"prelude over {PRELUDE_BYTES_MAX} bytes")
            check(f.headers["message"] == "prelude too large", f"prelude over the limit: {f}")
        finally:
            r.close()
        # One frame alone over the limit (a 5000-byte header line, under header_line_bytes_max).
        r = raw_connected(self.gw.port, self.login, self.passcode)
        try:
            r.send(frame("BEGIN", [("transaction", "t"), ("pad", "y" * 5000)]))
            f, _ = self.expect_error_then_close(r, f"one frame over {PRELUDE_BYTES_MAX} bytes")
            check(f.headers["message"] == "prelude too large", f"one large frame: {f}")
        finally:
            r.close()
        # A first SEND whose body alone exceeds prelude_bytes_max still reaches its owner.
        q = self.queue_name("bigfirst")
        body = bytes(range(256)) * 256  # 64 KiB
        r = raw_connected(self.gw.port, self.login, self.passcode)
        try:
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r1")], body,
                         content_length=True))
            f = r.read_frame()
            check(f and f.command == "RECEIPT", f"64 KiB first SEND: expected RECEIPT, got {f}")
            r.send(frame("SUBSCRIBE", [("destination", "/queue/" + q), ("id", "1")]))
            f = r.read_frame()
            check(f and f.command == "MESSAGE" and f.body == body,
                  f"64 KiB first SEND: got back {f}")
        finally:
            r.close()
        self.healthy("prelude over prelude_bytes_max")

    def case_slowloris(self):
        r = RawStomp(self.gw.port)
        result = {}

        def trickle():
            try:
                r.send(b"CONNECT\n")
                for b in b"accept-version:1.2\nhost:/\n":
                    time.sleep(1.0)
                    r.send(bytes([b]))
            except OSError as e:
                result["send_error"] = str(e)
        t = threading.Thread(target=trickle, daemon=True)
        t0 = time.monotonic()
        t.start()
        try:
            self.well_behaved("slowloris")
            f, _ = self.expect_error_then_close(r, "slow loris (CONNECT\\n, then 1 byte/s)")
            took = time.monotonic() - t0
            check(took < FRAME_TIMEOUT_MS / 1000 + 3,
                  f"slow loris ended after {took:.1f} s, frame_timeout_ms is {FRAME_TIMEOUT_MS}")
        finally:
            r.close()
            t.join(30)
        self.healthy("slow loris")

    def case_idle_connections(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, IDLE_SESSIONS + 2000) if hard != resource.RLIM_INFINITY \
            else IDLE_SESSIONS + 2000
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        check(want >= IDLE_SESSIONS + 200,
              f"RLIMIT_NOFILE hard limit {hard} is too low for {IDLE_SESSIONS} connections")
        socks = []
        t0 = time.monotonic()
        try:
            for i in range(IDLE_SESSIONS):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(("127.0.0.1", self.gw.port))
                socks.append(s)
                if time.monotonic() - t0 > 120:
                    raise Failure(f"only {i} connections opened in 120 s")
            opened = time.monotonic() - t0
            wait_until(f"{IDLE_SESSIONS} sessions in prelude", 30,
                       lambda: self.gw.status()["sessions"]["prelude"] >= IDLE_SESSIONS,
                       interval_s=0.5)
            # One prelude place is left (prelude_sessions_max = IDLE_SESSIONS + 1).
            t1 = time.monotonic()
            self.well_behaved("idle")
            took = time.monotonic() - t1
            # With every prelude place taken, one more session is refused: ERROR, close.
            hold = RawStomp(self.gw.port)
            socks.append(hold.sock)
            wait_until("the extra session in prelude", 10,
                       lambda: self.gw.status()["sessions"]["prelude"] >= IDLE_SESSIONS + 1)
            r = RawStomp(self.gw.port)
            try:
                self.expect_error_then_close(r, f"prelude session {IDLE_SESSIONS + 2} over "
                                             f"prelude_sessions_max")
            finally:
                r.close()
            st = self.gw.status()["sessions"]
            check(st["refused"] >= 1, f"refusal not counted: {st}")
        finally:
            for s in socks:
                s.close()
        self.findings.append(f"{IDLE_SESSIONS} idle connections opened in {opened:.1f} s; a "
                             f"well-behaved session beside them took {took:.2f} s")
        self.gw.wait_idle(timeout_s=60)
        self.healthy("idle connections")

    def case_wrong_logins(self):
        """Sessions with a wrong passcode, each naming a queue nobody used: every one gets the
        node's ERROR at CONNECT; no placement is recorded or persisted; a good session completes
        meanwhile."""
        # Every CONNECT is checked by a RabbitMQ node: the silent node takes no new sessions
        # meanwhile (its checks would time out and leave the gateway to answer), and a node
        # slowed by the load gets time to answer.
        self.gw.ctl("node", "maintenance", "silent")
        self.gw.ctl("set", "limits.connect_timeout_ms", str(WRONG_LOGINS_CONNECT_TIMEOUT_MS))
        try:
            self.wrong_logins()
        finally:
            self.gw.ctl("set", "limits.connect_timeout_ms", str(CONNECT_TIMEOUT_MS))
            self.gw.ctl("node", "up", "silent")

    def wrong_logins(self):
        state_file = os.path.join(self.gw.work, "state", "ownership")
        time.sleep(STATE_SAVE_SETTLE_S)  # a save the earlier cases armed lands first
        before_queues = self.gw.queues()
        before_state = open(state_file, "rb").read() if os.path.exists(state_file) else None
        bad = connect_frame(self.login, "wrong-" + self.passcode)
        prefix = PREFIX + "w-"
        errors, closed_without, other = 0, 0, []
        good_error = []

        def good():
            try:
                self.well_behaved("beside wrong logins")
            except Failure as e:
                good_error.append(str(e))
        sel = selectors.DefaultSelector()
        started = done = 0
        t0 = time.monotonic()
        beside = None
        while done < WRONG_LOGINS:
            check(time.monotonic() - t0 < WRONG_LOGINS_BOUND_S,
                  f"only {done} of {WRONG_LOGINS} wrong logins ended in "
                  f"{WRONG_LOGINS_BOUND_S} s")
            while started < WRONG_LOGINS and started - done < WRONG_LOGINS_AT_ONCE:
                sock = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
                sock.sendall(bad + frame("SEND", [("destination", f"/queue/{prefix}{started}"),
                                                  ("receipt", "r")], b"x"))
                sock.setblocking(False)
                sel.register(sock, selectors.EVENT_READ, bytearray())
                started += 1
            if beside is None and started >= WRONG_LOGINS // 2:
                beside = threading.Thread(target=good, daemon=True)
                beside.start()
            for key, _ in sel.select(timeout=1):
                try:
                    data = key.fileobj.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except ConnectionError:
                    data = b""
                if data:
                    key.data.extend(data)
                    continue
                got = bytes(key.data)
                if got.startswith(b"ERROR\n") and b"message:Bad CONNECT" in got:
                    errors += 1
                elif not got:
                    closed_without += 1
                else:
                    other.append(got[:120])
                sel.unregister(key.fileobj)
                key.fileobj.close()
                done += 1
        took = time.monotonic() - t0
        if beside is not None:
            beside.join(30)
        check(not good_error, f"the well-behaved session beside them: {good_error}")
        check(errors == WRONG_LOGINS, f"{errors} of {WRONG_LOGINS} wrong logins got the node's "
              f"ERROR at CONNECT; {closed_without} closed without one; others {other[:3]}")
        after_queues = self.gw.queues()
        new = [k for k in after_queues if k not in before_queues and k[1].startswith(prefix)]
        check(not new, f"{len(new)} queues of wrong logins entered the table, e.g. {new[:3]}")
        after_state = open(state_file, "rb").read() if os.path.exists(state_file) else None
        check(after_state == before_state,
              f"the state file changed during the wrong logins (a line of theirs: "
              f"{after_state is not None and prefix.encode() in after_state})")
        m = self.gw.ctl("metrics").stdout
        check('sluice_login_checks_total{result="refused"}' in m, "no refused login count")
        self.findings.append(f"{WRONG_LOGINS} wrong logins naming new queues: each got the node's "
                             f"ERROR at CONNECT in {took:.1f} s; table and state file unchanged")
        self.healthy("wrong logins")

    def case_reset_mid_splice(self):
        q = self.queue_name("reset")
        r = raw_connected(self.gw.port, self.login, self.passcode)
        total = 3 * 1024 * 1024
        try:
            # A small first SEND binds the session (the prelude parses it, so it must fit
            # body_bytes_max); the large one goes through the splice unparsed.
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r0")], b"first"))
            f = r.read_frame()
            check(f and f.command == "RECEIPT", f"reset case: expected RECEIPT r0, got {f}")
            r.send(frame("SEND", [("destination", "/queue/" + q), ("receipt", "r1"),
                                  ("content-length", str(total))])[:-1])  # head only, no NUL
            r.send(b"z" * (total // 3))
            wait_until("the session to be spliced", 10,
                       lambda: self.gw.status()["sessions"]["spliced"] >= 1)
            r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            r.close()  # RST
        self.well_behaved("reset")
        self.healthy("client reset mid-splice")
        bodies, errors = consume(self.gw.port, self.login, self.passcode, "/queue/" + q, 2,
                                 timeout_s=1, quiet_s=0.2)
        check(bodies == ["first"], f"after the reset the queue held {len(bodies)} messages "
              f"({[b[:10] for b in bodies]}), expected only the first")
        self.findings.append("client reset mid-splice (1 MiB of a 3 MiB second SEND): session "
                             "ended, only the first SEND delivered")

    def case_silent_owner(self):
        q = self.silent_queue
        # The login checks of earlier sessions may have gone to the silent node too, failed and
        # marked it down (passive health): the session must find it up, and its CONNECT must
        # not be checked there (it is answered from the login cache this session fills).
        r = raw_connected(self.gw.port, self.login, self.passcode)
        r.close()
        wait_until("the silent node to be up", 10,
                   lambda: self.gw.node_health("silent") == "up")
        r = RawStomp(self.gw.port)
        t0 = time.monotonic()
        try:
            r.send(connect_frame(self.login, self.passcode)
                   + frame("SEND", [("destination", "/queue/" + q), ("receipt", "r1")], b"hi"))
            f = r.read_frame()
            check(f and f.command == "CONNECTED", f"silent owner: expected CONNECTED, got {f}")
            self.well_behaved("silent")
            try:
                f = r.read_frame(timeout_s=SILENT_OWNER_BOUND_S)
            except Failure:
                sessions = self.gw.ctl_json("sessions")
                raise Failure(f"silent owner: the client heard nothing within "
                              f"{SILENT_OWNER_BOUND_S} s of its SEND; the owner read "
                              f"{sum(len(v) for v in self.silent.received.values())} bytes; "
                              f"sessions: {sessions}")
            took = time.monotonic() - t0
            check(f is not None and f.command == "ERROR" and f.headers.get("message"),
                  f"silent owner: expected ERROR with a message header, got {f} "
                  f"after {took:.1f} s")
            rest = r.wait_closed(5)
            check(rest == b"", f"silent owner: bytes after the ERROR: {rest!r}")
            self.findings.append(f"owner that never answers: ERROR message="
                                 f"{f.headers['message']!r} receipt-id="
                                 f"{f.headers.get('receipt-id')!r} then close after {took:.1f} s "
                                 f"(connect_timeout_ms {CONNECT_TIMEOUT_MS})")
        finally:
            r.close()
        with self.silent.lock:
            replays = [v for v in self.silent.received.values() if v.startswith(b"CONNECT")]
        check(len(replays) == 1 and b"\nheart-beat:0,0\n" in replays[0]
              and b"\0SEND\ndestination:/queue/" + q.encode() in replays[0],
              f"silent owner: expected one replayed CONNECT (heart-beat 0,0) and SEND, got "
              f"{[v.replace(self.passcode.encode(), b'***') for v in replays]}")
        wait_until("the owner side to be closed", 10,
                   lambda: len(self.silent.closed_by_peer) >= len(self.silent.received))
        self.healthy("silent owner")

    # -- run ----------------------------------------------------------------------------------

    def case_live_limits(self):
        """limits.* changed with `sluicectl set` apply to the next sessions; a value above what
        sluiced sized its memory for at start is refused and changes nothing."""
        gw = self.gw
        key = "limits.sessions_per_source_max"
        before = gw.ctl_json("get", key)["value"]
        hold = RawStomp(gw.port)  # one session from 127.0.0.1, in prelude
        try:
            wait_until("the held session in prelude", 10,
                       lambda: gw.status()["sessions"]["prelude"] >= 1)
            out = gw.ctl("set", key, "1").stdout
            check(out == f"{key} set to 1\n", f"sluicectl set: {out!r}")
            r = RawStomp(gw.port)
            try:
                f, _ = self.expect_error_then_close(r, f"a second session over {key} = 1")
                check(f.headers["message"] == "too many sessions from this address",
                      f"refused with {f.headers['message']!r}")
            finally:
                r.close()
        finally:
            hold.close()
            gw.ctl("set", key, str(before))
        check(gw.ctl_json("get", key)["value"] == before, f"{key} not restored")
        self.well_behaved("after the per-source limit was raised again")
        started = gw.ctl_json("get", "limits.sessions_max")["value"]
        p = gw.ctl("set", "limits.sessions_max", str(int(started) + 1), expect=1)
        check("the value sluiced started with" in p.stderr and "restart to raise it" in p.stderr,
              f"sessions_max above its start value: {p.stderr!r}")
        check(gw.ctl_json("get", "limits.sessions_max")["value"] == started,
              "a refused limit changed")
        self.findings.append(f"{key} set to 1 at run time: the next session from the same "
                             f"address refused; limits.sessions_max above {started}: "
                             f"{p.stderr.strip()!r}")
        self.healthy("live limits")

    def run(self):
        self.silent = SilentOwner()
        self.silent.start()
        nodes = (cluster_nodes(self.cluster)
                 + node_section("silent", f"127.0.0.1:{self.silent.port}")
                 + pin_section(self.silent_queue, "silent")
                 # Placement could choose the silent node: the other queues are pinned.
                 + pin_section(self.good, "rabbit1")
                 + pin_section(PREFIX + "bigfirst", "rabbit2")
                 + pin_section(PREFIX + "reset", "rabbit1"))
        limits = f"""sessions_max = {IDLE_SESSIONS + 100}
sessions_per_source_max = {IDLE_SESSIONS + 100}
prelude_sessions_max = {IDLE_SESSIONS + 1}
prelude_bytes_max = {PRELUDE_BYTES_MAX}
frame_timeout_ms = {FRAME_TIMEOUT_MS}
connect_timeout_ms = {CONNECT_TIMEOUT_MS}"""
        work = os.path.join(self.work, "gw")
        os.makedirs(work)
        port = free_port()
        text = base_config("gw-bad", work, port, self.cluster, nodes=nodes, limits=limits,
                           spill="allow_anonymous = true")
        self.gw = Sluiced(self.sluiced, self.sluicectl, work, text, port).start()
        self.queues.append(self.good)
        self.well_behaved("first")
        selected = os.environ.get("SLUICE_GW_CASES", "rhpslxotw")
        times = {}
        failures = []
        t = time.monotonic()
        for key, name, case in (("r", "random bytes", self.case_random_bytes),
                                ("h", "HTTP GET", self.case_http),
                                ("p", "prelude_bytes_max", self.case_prelude_too_large),
                                ("s", "slow loris", self.case_slowloris),
                                ("x", "reset mid-splice", self.case_reset_mid_splice),
                                ("o", "silent owner", self.case_silent_owner),
                                ("t", "limits tuned at run time", self.case_live_limits),
                                ("l", "10,000 idle connections", self.case_idle_connections),
                                ("w", "10,000 wrong logins", self.case_wrong_logins)):
            if key not in selected:
                continue
            t0 = time.monotonic()
            try:
                case()
                say(f"ok: {name}")
            except Failure as e:
                # The next cases still run (each starts from an idle, healthy gateway).
                failures.append(f"{name}: {e}")
                print(f"FAILED: {name}: {e}", file=sys.stderr, flush=True)
                if not self.gw.alive():
                    break
                try:
                    self.gw.wait_idle(timeout_s=30)
                except Failure as e2:
                    failures.append(f"after {name}: {e2}")
                    break
            times[name] = time.monotonic() - t0
        for line in self.findings:
            say("  " + line)
        say("times: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
            + f", total {time.monotonic() - t:.1f} s")
        if failures:
            raise Failure("; ".join(failures))
        self.gw.stop()

    def cleanup(self):
        if self.silent:
            self.silent.stop()
        delete_queues_quietly(self.cluster, self.queues)


def main():
    return run_main(__doc__, "sluice-gwbad-", "gateway_bad_input", Run)


if __name__ == "__main__":
    sys.exit(main())
