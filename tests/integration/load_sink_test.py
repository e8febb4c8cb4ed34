#!/usr/bin/python3
"""sluice-load against `sluice-load serve` on loopback: a short run with producers and consumers
on several queues (receipts, client-individual acks, round-robin spread, sizes from a
distribution), then a new-session run; both report zero lost, duplicated and out of order and
exit 0. Then a lossy arrangement: a proxy in this test, between sluice-load and the sink, drops
exactly one SEND frame; sluice-load must report that message lost and exit non-zero, with
receipts off (the message counts as acknowledged once written, so lost_acknowledged is 1) and
with receipts on (its RECEIPT never comes: unconfirmed 1, an error).

Usage: load_sink_test.py SLUICE_LOAD
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

RUN_TIMEOUT_S = 30
READY_TIMEOUT_S = 10
DROP_NTH_SEND = 500  # the proxy drops this SEND (1-based) of the first connection


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the sink exited {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {READY_TIMEOUT_S} s")


class DropOneSend:
    """A TCP proxy on loopback that forwards both ways, parsing the client's STOMP frames (NUL
    terminated; sluice-load's bodies hold no NUL) and dropping exactly one SEND frame."""

    def __init__(self, upstream_port, nth):
        self.upstream_port = upstream_port
        self.nth = nth
        self.sends = 0
        self.dropped = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.socks += [client, server]
            threading.Thread(target=self._client_to_server, args=(client, server),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with_shutdown(dst)

    def _client_to_server(self, src, dst):
        pending = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                pending += data
                out = []
                while True:
                    nul = pending.find(b"\0")
                    if nul < 0:
                        break
                    frame, pending = pending[:nul + 1], pending[nul + 1:]
                    if frame.lstrip(b"\r\n").startswith(b"SEND\n"):
                        with self.lock:
                            self.sends += 1
                            drop = self.sends == self.nth
                            self.dropped += drop
                        if drop:
                            continue
                    out.append(frame)
                if out:
                    dst.sendall(b"".join(out))
        except OSError:
            pass
        finally:
            with_shutdown(dst)

    def close(self):
        self.stopping = True
        for s in [self.listener] + self.socks:
            try:
                s.close()
            except OSError:
                pass


def with_shutdown(s):
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def load(tool, port, *args):
    cmd = [tool, "--target", f"127.0.0.1:{port}", "--json", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = r.stdout.strip().splitlines()
    assert lines, f"{' '.join(cmd)}: no summary; exit {r.returncode}\n{r.stderr[-3000:]}"
    return r.returncode, json.loads(lines[-1]), r.stderr


def clean(label, rc, res, err):
    assert rc == 0, f"{label}: exit {rc}: {res}\n{err[-2000:]}"
    for key in ("lost", "duplicated", "out_of_order", "unconfirmed", "errors"):
        assert res[key] == 0, f"{label}: {key} = {res[key]}: {res}"
    assert res["checked"] and res["sent"] > 0 and res["received"] == res["sent"], res
    print(f"{label}: {res['sent']} sent, {res['received']} received, "
          f"{res['throughput_msg_s']:.0f} msg/s, sessions {res['sessions']}: clean")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    port = free_port()
    sink = subprocess.Popen([tool, "serve", "--listen", f"127.0.0.1:{port}", "--duration", "120"],
                            stderr=subprocess.PIPE, text=True)
    proxy = None
    try:
        wait_listening(port, sink)
        rc, res, err = load(tool, port, "-c", "4", "-p", "3", "--consumer-connections", "2",
                            "--consumers-per-connection", "3", "-q", "6",
                            "--spread", "round-robin", "--size", "exp:300",
                            "--ack", "client-individual", "-d", "2", "-n", "20000")
        clean("sink, 12 producers, 6 consumers, 6 queues", rc, res, err)
        rc, res, err = load(tool, port, "-c", "4", "--consumer-connections", "1",
                            "--new-session", "20", "-d", "1")
        clean("sink, new-session mode", rc, res, err)
        assert res["sessions"] > 0, res

        proxy = DropOneSend(port, DROP_NTH_SEND)
        rc, res, err = load(tool, proxy.port, "-c", "1", "--consumer-connections", "1",
                            "-n", "2000", "--no-receipts", "--drain-timeout", "2")
        assert proxy.dropped == 1, f"the proxy dropped {proxy.dropped} SENDs"
        assert rc == 1, f"a lost message must fail the run (exit {rc}): {res}\n{err[-2000:]}"
        assert res["lost"] == 1 and res["lost_acknowledged"] == 1, res
        assert res["sent"] == 2000 and res["received"] == 1999, res
        assert res["duplicated"] == 0 and res["out_of_order"] == 0, res
        assert res["result"] == "failed" and "lost" in res["failures"][0], res
        print(f"proxy dropped SEND #{DROP_NTH_SEND}, no receipts: lost 1, exit {rc}")
        proxy.close()

        proxy = DropOneSend(port, DROP_NTH_SEND)
        rc, res, err = load(tool, proxy.port, "-c", "1", "--consumer-connections", "1",
                            "-n", "2000", "--drain-timeout", "2")
        assert proxy.dropped == 1, f"the proxy dropped {proxy.dropped} SENDs"
        assert rc == 1, f"a lost message must fail the run (exit {rc}): {res}\n{err[-2000:]}"
        assert res["lost"] == 1 and res["unconfirmed"] == 1 and res["errors"] >= 1, res
        assert res["acknowledged"] == 1999 and res["received"] == 1999, res
        print(f"proxy dropped SEND #{DROP_NTH_SEND}, receipts on: lost 1, unconfirmed 1, "
              f"exit {rc}")
    finally:
        if proxy:
            proxy.close()
        sink.terminate()
        try:
            sink.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sink.kill()
            sink.wait()
    print(sink.stderr.read().strip())
    assert sink.returncode == 0, f"the sink exited {sink.returncode}"
    print("load against the sink, and through a lossy proxy: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
