#!/usr/bin/python3
"""The fidelity scenario (tests/integration/client_fidelity_test.py) through stomp.py.

Usage: fidelity_stomp_py.py HOST PORT LOGIN PASSCODE PREFIX VHOST
Prints one JSON object, the transcript of what was observed, on stdout (also when a step
fails: that step's "error" says why). Every wait is bounded; an alarm ends the program after
WATCHDOG_S with what it has.

stomp.py's own API throughout: every frame type takes a receipt header, its listener exposes
the server's heart-beats (on_heartbeat) and, through on_send with no command, the beats it sends
itself. Its CONNECT is the STOMP command (its default, with_connect_command=False).
"""

import json
import logging
import os
import queue
import signal
import sys
import threading
import time

import stomp
from stomp.exception import ConnectFailedException

WATCHDOG_S = 75
RECEIPT_TIMEOUT_S = 10
QUIET_S = 3  # (3) how long bodies may arrive on -b
IDLE_S = 10  # (5)
HEART_BEAT = (2000, 2000)


class Listener(stomp.ConnectionListener):
    def __init__(self):
        self.frames = queue.Queue()  # ("MESSAGE"|"RECEIPT"|"ERROR", headers, body)
        self.connected = threading.Event()
        self.connected_frame = None
        self.disconnected = threading.Event()
        self.lock = threading.Lock()
        self.beats_received = 0
        self.beats_sent = 0

    def on_connected(self, frame):
        self.connected_frame = frame
        self.connected.set()

    def on_message(self, frame):
        self.frames.put(("MESSAGE", dict(frame.headers), frame.body))

    def on_receipt(self, frame):
        self.frames.put(("RECEIPT", dict(frame.headers), frame.body))

    def on_error(self, frame):
        self.frames.put(("ERROR", dict(frame.headers), frame.body))

    def on_disconnected(self):
        self.disconnected.set()

    def on_heartbeat(self):
        with self.lock:
            self.beats_received += 1

    def on_send(self, frame):
        if frame.cmd is None:  # the heart-beat loop transmits Frame(None): one EOL
            with self.lock:
                self.beats_sent += 1

    def counts(self):
        with self.lock:
            return self.beats_received, self.beats_sent


def collect(lis, receipts, messages, timeout_s):
    """Frames until every receipt id in `receipts` and `messages` MESSAGEs arrived, an ERROR, or
    the timeout: (receipt ids in arrival order, [(body, headers)], [other frames])."""
    got_r, got_m, other = [], [], []
    deadline = time.monotonic() + timeout_s
    while not (set(receipts) <= set(got_r) and len(got_m) >= messages):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            cmd, headers, body = lis.frames.get(timeout=min(left, 0.2))
        except queue.Empty:
            if lis.disconnected.is_set():
                other.append({"command": "(closed)"})
                break
            continue
        if cmd == "RECEIPT":
            got_r.append(headers.get("receipt-id"))
        elif cmd == "MESSAGE":
            got_m.append((body, headers))
        else:
            other.append({"command": cmd, "message": headers.get("message"), "body": body})
            break
    return got_r, got_m, other


def connection(host, port, vhost):
    c = stomp.Connection12([(host, port)], heartbeats=HEART_BEAT, vhost=vhost,
                           reconnect_attempts_max=1, timeout=10)
    lis = Listener()
    c.set_listener("fidelity", lis)
    return c, lis


class QuietShutdownRace(logging.Filter):
    """stomp.py warns when its receiver thread closed the socket (the server closed it after an
    ERROR) just before disconnect_socket() shuts it down: a harmless race, not an observation."""

    def filter(self, record):
        return "Unable to issue SHUT_RDWR" not in record.getMessage()


logging.getLogger("stomp.py").addFilter(QuietShutdownRace())


def drop(c):
    """Closes the socket without a DISCONNECT (sessions that ended in an ERROR)."""
    try:
        c.transport.disconnect_socket()
    except Exception:  # noqa: BLE001 - already closed
        pass


def main():
    host, port, login, passcode, prefix, vhost = sys.argv[1:7]
    port = int(port)
    qa, qb = f"/queue/{prefix}-a", f"/queue/{prefix}-b"
    # "timing": heart-beat counts and step durations (not compared: they vary run to run).
    out = {"library": "stomp.py " + ".".join(map(str, stomp.__version__)),
           "timing": {"seconds": {}}}
    step = ["start"]

    def on_alarm(*_):
        out["watchdog"] = f"{WATCHDOG_S} s passed, in step {step[0]}"
        print(json.dumps(out, sort_keys=True), flush=True)
        os._exit(3)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(WATCHDOG_S)

    def run(name, fn):
        step[0] = name
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded in the transcript
            out.setdefault(name, {})["error"] = f"{type(e).__name__}: {e}"
            return False
        finally:
            out["timing"]["seconds"][name] = round(time.monotonic() - t0, 2)
        return True

    c, lis = connection(host, port, vhost)

    # (1) connect.
    def s_connect():
        c.connect(login, passcode, wait=True)
        h = lis.connected_frame.headers
        out["connect"] = {"header_names": sorted(h), "version": h.get("version"),
                          "heart-beat": h.get("heart-beat"), "server": h.get("server")}
    if not run("connect", s_connect):
        print(json.dumps(out, sort_keys=True))
        return 0

    # (2) client-individual subscription, two receipted SENDs, ACK the first, NACK the second.
    def s_ack_nack():
        r = out["ack_nack"] = {}
        c.subscribe(qa, id="sub-a", ack="client-individual", receipt="a-sub")
        c.send(qa, "a-1", receipt="a-send-1")
        c.send(qa, "a-2", receipt="a-send-2")
        rids, msgs, other = collect(lis, ["a-sub", "a-send-1", "a-send-2"], 2, RECEIPT_TIMEOUT_S)
        r["receipts"], r["bodies"], r["other"] = rids, [b for b, _ in msgs], other
        by_body = {b: h for b, h in msgs}
        if "a-1" in by_body:
            c.ack(by_body["a-1"]["ack"], receipt="a-ack")
        if "a-2" in by_body:
            c.nack(by_body["a-2"]["ack"], receipt="a-nack")
        # NACK requeues (RabbitMQ's default): a-2 comes again, redelivered.
        rids, msgs, other = collect(lis, ["a-ack", "a-nack"], 1, RECEIPT_TIMEOUT_S)
        r["ack_nack_receipts"] = rids
        r["redelivered"] = [[b, h.get("redelivered")] for b, h in msgs]
        r["other"] += other
        for _, h in msgs:
            c.ack(h["ack"])
    run("ack_nack", s_ack_nack)

    # (3) transactions: aborted then committed; only the committed body arrives.
    def s_tx():
        r = out["transactions"] = {}
        c.begin("tx-1", receipt="tx-begin-1")
        c.send(qb, "aborted", transaction="tx-1")
        c.abort("tx-1", receipt="tx-abort")
        c.begin("tx-2", receipt="tx-begin-2")
        c.send(qb, "committed", transaction="tx-2")
        c.commit("tx-2", receipt="tx-commit")
        rids, _, other = collect(lis, ["tx-begin-1", "tx-abort", "tx-begin-2", "tx-commit"], 0,
                                 RECEIPT_TIMEOUT_S)
        c.subscribe(qb, id="sub-b", ack="auto", receipt="b-sub")
        rids2, msgs, other2 = collect(lis, ["b-sub"], 99, QUIET_S)
        r["receipts"], r["bodies"], r["other"] = rids + rids2, [b for b, _ in msgs], other + other2
    run("transactions", s_tx)

    # (4) UNSUBSCRIBE both subscriptions, with receipts.
    def s_unsub():
        c.unsubscribe("sub-a", receipt="unsub-a")
        c.unsubscribe("sub-b", receipt="unsub-b")
        rids, _, other = collect(lis, ["unsub-a", "unsub-b"], 0, RECEIPT_TIMEOUT_S)
        out["unsubscribe"] = {"receipts": rids, "other": other}
    run("unsubscribe", s_unsub)

    # (5) idle with heart-beats both ways, then a receipted SEND.
    def s_idle():
        r = out["heart_beats"] = {}
        rec0, sent0 = lis.counts()
        time.sleep(IDLE_S)
        rec1, sent1 = lis.counts()
        out["timing"].update(beats_received=rec1 - rec0, beats_sent=sent1 - sent0)
        r["connected_after"] = c.is_connected()
        c.send(qa, "after-idle", receipt="idle-send")
        rids, _, other = collect(lis, ["idle-send"], 0, RECEIPT_TIMEOUT_S)
        r["receipts"], r["other"] = rids, other
    run("heart_beats", s_idle)

    # (8) DISCONNECT with a receipt (stomp.py waits for it, then closes the socket).
    def s_disconnect():
        c.disconnect(receipt="disc")
        rids, _, other = collect(lis, ["disc"], 0, RECEIPT_TIMEOUT_S)
        out["disconnect"] = {"receipts": rids, "other": other}
    run("disconnect", s_disconnect)

    # (6) a fresh session: a receipted SEND to an invalid destination.
    def s_invalid():
        r = out["invalid_destination"] = {}
        c2, lis2 = connection(host, port, vhost)
        try:
            c2.connect(login, passcode, wait=True)
            c2.send("/invalid-dest/x", "x", receipt="inv-send")
            deadline = time.monotonic() + RECEIPT_TIMEOUT_S
            frames = []
            while time.monotonic() < deadline:
                try:
                    cmd, headers, body = lis2.frames.get(timeout=0.2)
                except queue.Empty:
                    continue
                frames.append(cmd)
                if cmd == "ERROR":
                    r["message"] = headers.get("message")
                    r["body"] = body
                    r["receipt-id"] = headers.get("receipt-id")
                    r["receipt_id_matches"] = headers.get("receipt-id") == "inv-send"
                    break
            r["frames"] = frames
        finally:
            drop(c2)
    run("invalid_destination", s_invalid)

    # (7) a wrong passcode and an unknown vhost: each fails at connect.
    def bad_connect(name, pw, vh):
        def s():
            r = out[name] = {}
            c3, lis3 = connection(host, port, vh)
            try:
                try:
                    c3.connect(login, pw, wait=True)
                    r["failed_at_connect"] = False
                except ConnectFailedException:
                    r["failed_at_connect"] = True
                r["connected"] = lis3.connected.is_set()
                try:
                    cmd, headers, body = lis3.frames.get(timeout=RECEIPT_TIMEOUT_S)
                    r["frame"], r["message"], r["body"] = cmd, headers.get("message"), body
                except queue.Empty:
                    r["frame"] = None
            finally:
                drop(c3)
        return s
    run("bad_passcode", bad_connect("bad_passcode", "wrong-" + passcode, vhost))
    run("bad_vhost", bad_connect("bad_vhost", passcode, "no-such-vhost"))

    signal.alarm(0)
    print(json.dumps(out, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
