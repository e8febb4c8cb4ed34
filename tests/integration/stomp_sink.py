#!/usr/bin/python3
"""A STOMP sink for the DPDK engine's integration test (dpdk_gateway_test.py): a node that
answers CONNECT with CONNECTED, hashes each SEND's body (SHA-256) as it streams in, without
holding it, and reports every SEND as a JSON line. Run inside the nodes' namespace:

    stomp_sink.py --listen IP:PORT --report FILE

Sink (below) starts it as a child and ends it by PID.
"""

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_util import check, wait_until  # noqa: E402
from netns_util import IP, netns  # noqa: E402

CHUNK_BYTES = 1 << 20
IO_TIMEOUT_S = 60  # one recv or send
SINK_LIFETIME_S = 1200
SINK_HEAD_MAX = 64 * 1024


def sink_main(listen, report_path):
    """Accepts STOMP sessions; answers CONNECT with CONNECTED, hashes each SEND's body as it
    streams in, writes one JSON line per SEND to report_path and answers its receipt. TCP health
    probes (connect, close) are ignored. Ends after SINK_LIFETIME_S or on SIGTERM."""
    host, port = listen.rsplit(":", 1)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, int(port)))
    srv.listen(64)
    srv.settimeout(1.0)
    report_lock = threading.Lock()

    def report(obj):
        with report_lock, open(report_path, "a") as f:
            f.write(json.dumps(obj) + "\n")

    def serve(conn, peer):
        conn.settimeout(IO_TIMEOUT_S)
        buf = bytearray()

        def fill():
            data = conn.recv(CHUNK_BYTES)
            if not data:
                raise EOFError
            buf.extend(data)

        def read_head():
            while True:
                while buf[:1] in (b"\n", b"\r"):
                    del buf[:1]
                end = buf.find(b"\n\n")
                if end >= 0:
                    head = bytes(buf[:end]).replace(b"\r", b"").decode()
                    del buf[:end + 2]
                    lines = head.split("\n")
                    headers = {}
                    for line in lines[1:]:
                        k, _, v = line.partition(":")
                        headers.setdefault(k, v)
                    return lines[0], headers
                if len(buf) > SINK_HEAD_MAX:
                    raise ValueError("frame head over 64 KiB")
                fill()

        def skip_body():
            while b"\0" not in buf:
                fill()
            del buf[:buf.index(b"\0") + 1]

        try:
            while True:
                command, headers = read_head()
                if command in ("CONNECT", "STOMP"):
                    skip_body()
                    conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:sink\n\n\0")
                elif command == "SEND":
                    n = int(headers["content-length"])
                    h = hashlib.sha256()
                    t0 = time.monotonic()
                    left = n
                    take = min(left, len(buf))
                    h.update(buf[:take])
                    del buf[:take]
                    left -= take
                    view = memoryview(bytearray(CHUNK_BYTES))
                    while left:
                        got = conn.recv_into(view, min(left, CHUNK_BYTES))
                        if not got:
                            raise EOFError
                        h.update(view[:got])
                        left -= got
                    while not buf:
                        fill()
                    nul = buf[:1] == b"\0"
                    del buf[:1]
                    report({"peer": f"{peer[0]}:{peer[1]}", "destination":
                            headers.get("destination"), "bytes": n, "sha256": h.hexdigest(),
                            "nul": nul, "seconds": round(time.monotonic() - t0, 3)})
                    if "receipt" in headers:
                        conn.sendall(f"RECEIPT\nreceipt-id:{headers['receipt']}\n\n\0".encode())
                else:
                    skip_body()
                    if "receipt" in headers:
                        conn.sendall(f"RECEIPT\nreceipt-id:{headers['receipt']}\n\n\0".encode())
                    if command == "DISCONNECT":
                        return
        except (EOFError, OSError, ValueError, KeyError) as e:
            if not isinstance(e, EOFError):
                report({"peer": f"{peer[0]}:{peer[1]}", "error": repr(e)})
        finally:
            conn.close()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    deadline = time.monotonic() + SINK_LIFETIME_S
    while time.monotonic() < deadline:
        try:
            conn, peer = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn, peer), daemon=True).start()
    return 0


class Sink:
    """The sink process, started inside N and ended by PID."""

    def __init__(self, topo, work, listen):
        self.report_path = os.path.join(work, "sink.jsonl")
        self.log_path = os.path.join(work, "sink.log")
        self.listen = listen
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [IP, "netns", "exec", topo.n, sys.executable, os.path.abspath(__file__),
             "--listen", listen, "--report", self.report_path],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        host, port = listen.rsplit(":", 1)

        def listening():
            check(self.proc.poll() is None, f"the sink exited {self.proc.returncode}: "
                  f"{open(self.log_path).read()}")
            with netns(topo.n):
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    return True
                except OSError:
                    return False
        wait_until(f"the sink on {listen}", 10, listening)

    def reports(self):
        try:
            with open(self.report_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def main():
    ap = argparse.ArgumentParser(prog="stomp_sink.py", description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True, help="IP:PORT")
    ap.add_argument("--report", required=True, help="file that gets a JSON line per SEND")
    a = ap.parse_args()
    return sink_main(a.listen, a.report)


if __name__ == "__main__":
    sys.exit(main())
