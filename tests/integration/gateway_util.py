"""Shared helpers of the gateway integration tests (gateway_test.py, gateway_bad_input_test.py):
sluiced started on a temp config and stopped, sluicectl calls, STOMP clients through stomp.py
and over raw sockets.

Every wait is bounded in time; every process started here is ended here, by PID.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import stomp

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
LOG_TAIL_LINES = 40
DOC_METRICS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "doc",
                           "metrics.md")


def check_metrics_documented(text):
    """Every family `sluicectl metrics` printed (its # TYPE lines) is in doc/metrics.md."""
    families = re.findall(r"^# TYPE (\S+) ", text, re.M)
    check(families, "no # TYPE line in the metrics")
    with open(DOC_METRICS, encoding="utf-8") as f:
        doc = f.read()
    missing = [name for name in families if f"`{name}`" not in doc]
    check(not missing, f"doc/metrics.md does not list {missing}")
    return len(families)


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def say(message):
    print(message, flush=True)


def wait_until(what, timeout_s, probe, interval_s=0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Failure(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def free_port():
    """A loopback port nobody listens on now (the kernel's pick; never 27200)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 27200:
            return port
    raise Failure("no free port")


def run_main(doc, work_prefix, name, run_class):
    """The main() of a gateway test: argv is SLUICED SLUICECTL; run_class(sluiced, sluicectl,
    cluster, work) builds the test's Run on the shared RabbitMQ cluster, whose run() is the test
    and cleanup() its clean-up. On a Failure the sluiced log's tail is printed; sluiced is always
    stopped and the work dir removed."""
    from rabbit_cluster import shared_cluster
    if len(sys.argv) != 3:
        print(doc, file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix=work_prefix)
    run = None
    ok = False
    try:
        run = run_class(sys.argv[1], sys.argv[2], shared_cluster(), work)
        run.run()
        ok = True
    except Failure as e:
        print(f"FAILED: {e}", file=sys.stderr)
        if run and run.gw:
            print("sluiced log (tail):\n" + run.gw.log_tail(), file=sys.stderr)
    finally:
        if run:
            try:
                if run.gw:
                    run.gw.stop()
            except Failure as e:
                print(f"FAILED: {e}", file=sys.stderr)
                ok = False
            run.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    if ok:
        print(f"{name}: ok")
        return 0
    return 1


# ---------------------------------------------------------------------------------------------
# Configuration


def delete_queues_quietly(cluster, queues, vhost="/"):
    """Deletes each queue of a test run; one that cannot be deleted is reported, not raised."""
    for q in queues:
        try:
            cluster.delete_queue(vhost, q)
        except Exception as e:  # noqa: BLE001
            print(f"could not delete queue {q}: {e}", file=sys.stderr)


def node_section(name, address, broker_node=""):
    text = f'[[nodes]]\nname = "{name}"\naddress = "{address}"\n'
    if broker_node:
        text += f'broker_node = "{broker_node}"\n'
    return text


def cluster_nodes(cluster):
    """[[nodes]] rabbit1, rabbit2, ... for cluster.nodes[0], [1], ... (broker_node mapped)."""
    return "".join(node_section(f"rabbit{i + 1}", f"127.0.0.1:{n['stomp_port']}", n["name"])
                   for i, n in enumerate(cluster.nodes))


def sluice_node_index(name):
    """cluster.nodes index of the Sluice node "rabbitN" written by cluster_nodes()."""
    check(name.startswith("rabbit"), f"unexpected node name {name!r}")
    return int(name[len("rabbit"):]) - 1


def pin_section(queue, node, vhost="/"):
    return f'[[pins]]\nvhost = "{vhost}"\nqueue = "{queue}"\nnode = "{node}"\n'


def base_config(gw_id, work, listen_port, cluster, *, nodes, limits="", spill="",
                extra="", health_interval_ms=300, gateway="", listen_host="127.0.0.1",
                log_level="info"):
    """A config: loopback listener, admin socket and state in work, fast TCP health probes,
    the drainer logging in as the cluster's user. `nodes` is [[nodes]] (and [[pins]]) text;
    `gateway` more [gateway] keys (e.g. engine = "dpdk")."""
    return f"""
[gateway]
id = "{gw_id}"
state_dir = "{work}/state"
{gateway}
[admin]
socket = "{work}/admin.sock"
log_level = "{log_level}"
[listen]
address = "{listen_host}:{listen_port}"
[health]
probe = "tcp"
interval_ms = {health_interval_ms}
timeout_ms = 200
rise = 1
fall = 1
[limits]
{limits}
[spill]
segment_bytes = 2097152
max_bytes = 67108864
{spill}
[drain]
login = "{cluster.login}"
passcode_file = "{cluster.passcode_file}"
window = 16
backoff_base_ms = 50
backoff_max_ms = 500
{extra}
{nodes}
"""


def add_spill_user(sluicectl, users_file, name, passcode, allow, work):
    """`sluicectl user add NAME --users-file F --password-file P --allow ...`."""
    pw = os.path.join(work, f"{name}.pw")
    with open(pw, "w") as f:
        f.write(passcode + "\n")
    args = [sluicectl, "user", "add", name, "--users-file", users_file, "--password-file", pw]
    for a in allow:
        args += ["--allow", a]
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, f"sluicectl user add exited {p.returncode}: {p.stdout}{p.stderr}")


# ---------------------------------------------------------------------------------------------
# sluiced


class Sluiced:
    """One sluiced process on a config written into work; restartable with the same state."""

    def __init__(self, sluiced, sluicectl, work, config_text, listen_port):
        self.sluiced, self.sluicectl, self.work = sluiced, sluicectl, work
        self.port = listen_port
        self.socket_path = os.path.join(work, "admin.sock")
        self.config_path = os.path.join(work, "sluice.toml")
        self.log_path = os.path.join(work, "sluiced.log")
        self.proc = None
        self.log = None
        with open(self.config_path, "w") as f:
            f.write(config_text)

    # Hooks for engines that run elsewhere (the DPDK engine in a network namespace).
    def command(self):
        return [self.sluiced, "--config", self.config_path]

    def after_answering(self):
        """Runs once the admin API answers, before the listener is probed."""

    def probe_connect(self):
        """A TCP connection to the listener, as a client would make it."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=1)

    def start(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT)
        try:
            return self._until_ready()
        except BaseException:
            # Not ready: the caller never gets this object to stop, so end the process here
            # (by PID: the one we started) rather than leave it running.
            self.kill9()
            raise

    def _until_ready(self):
        def answering():
            check(self.proc.poll() is None,
                  f"sluiced exited {self.proc.returncode}:\n{self.log_tail()}")
            p = subprocess.run([self.sluicectl, "--socket", self.socket_path, "status"],
                               capture_output=True, text=True, timeout=10)
            return p.returncode == 0
        wait_until("sluiced to answer", START_TIMEOUT_S, answering)
        self.after_answering()

        def listening():
            try:
                with self.probe_connect():
                    return True
            except OSError:
                return False
        wait_until(f"sluiced to listen on {self.port}", START_TIMEOUT_S, listening)
        wait_until("the probe connection's session to end", 10,
                   lambda: self.status()["sessions"]["active"] == 0)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, expecting exit 0 within STOP_TIMEOUT_S."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise Failure(f"sluiced did not stop within {STOP_TIMEOUT_S} s of SIGTERM")
                check(rc == 0, f"sluiced exited {rc} on SIGTERM")
            else:
                raise Failure(f"sluiced had already exited with {proc.returncode}")
        finally:
            self.log.close()

    def kill9(self):
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.kill()  # SIGKILL, by PID: the process we started
        proc.wait(timeout=10)
        self.log.close()

    def log_text(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines=LOG_TAIL_LINES):
        return "".join(self.log_text().splitlines(True)[-lines:])

    def ctl(self, *args, expect=0):
        p = subprocess.run([self.sluicectl, "--socket", self.socket_path, *args],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == expect,
              f"sluicectl {' '.join(args)} exited {p.returncode}, expected {expect}\n"
              f"stdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    def ctl_json(self, *args):
        return json.loads(self.ctl("--json", *args).stdout)

    def status(self):
        return self.ctl_json("status")

    def queues(self):
        """{(vhost, queue): record} from `sluicectl queues --json`."""
        return {(q["vhost"], q["queue"]): q for q in self.ctl_json("queues")["queues"]}

    def node_health(self, name):
        for n in self.ctl_json("nodes")["nodes"]:
            if n["name"] == name:
                return n["health"]
        raise Failure(f"no node {name} in sluicectl nodes")

    def wait_idle(self, timeout_s=15):
        """Healthy (status answers) and no session left."""
        def idle():
            s = self.status()["sessions"]
            return s["active"] == 0 and s["prelude"] == 0
        try:
            wait_until("sessions to return to 0", timeout_s, idle, interval_s=0.2)
        except Failure:
            raise Failure(f"sessions did not return to 0 within {timeout_s} s: "
                          f"{self.status()['sessions']}; sessions: {self.ctl_json('sessions')}")


# ---------------------------------------------------------------------------------------------
# stomp.py clients


class Listener(stomp.ConnectionListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.messages = []  # (headers, body)
        self.receipts = []
        self.errors = []  # (headers, body)
        self.receipt_cv = threading.Condition(self.lock)

    def on_connected(self, frame):
        self.connected.set()

    def on_message(self, frame):
        with self.lock:
            self.messages.append((frame.headers, frame.body))

    def on_receipt(self, frame):
        with self.lock:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.receipt_cv.notify_all()

    def on_error(self, frame):
        with self.lock:
            self.errors.append((frame.headers, frame.body))
            self.receipt_cv.notify_all()

    def on_disconnected(self):
        with self.lock:
            self.disconnected.set()
            self.receipt_cv.notify_all()

    def bodies(self):
        with self.lock:
            return [b for _, b in self.messages]

    def error_messages(self):
        with self.lock:
            return [h.get("message") for h, _ in self.errors]

    def wait_receipt(self, rid, timeout_s):
        """True once rid arrived; False on ERROR, disconnect or timeout."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while rid not in self.receipts:
                left = deadline - time.monotonic()
                if left <= 0 or self.errors or self.disconnected.is_set():
                    return rid in self.receipts
                self.receipt_cv.wait(min(left, 0.2))
            return True


def stomp_client(port, login, passcode, version="1.2", timeout_s=10, auto_decode=True,
                 host="127.0.0.1"):
    """A connected stomp.py client and its Listener; Failure if CONNECTED does not come."""
    hp = [(host, port)]
    if version == "1.0":
        c = stomp.Connection10(hp, auto_decode=auto_decode)
    elif version == "1.1":
        c = stomp.Connection11(hp, heartbeats=(0, 0), vhost="/", auto_decode=auto_decode)
    else:
        c = stomp.Connection12(hp, heartbeats=(0, 0), vhost="/", auto_decode=auto_decode)
    listener = Listener()
    c.set_listener("l", listener)
    c.connect(login, passcode, wait=False)
    if not listener.connected.wait(timeout_s):
        errors = listener.errors
        close_quietly(c)
        raise Failure(f"no CONNECTED from {host}:{port} within {timeout_s} s "
                      f"(errors: {errors})")
    return c, listener


def close_quietly(c):
    try:
        if c.is_connected():
            c.disconnect()
    except Exception:  # noqa: BLE001 - a test client going away; nothing to report
        pass
    try:
        c.transport.stop()
    except Exception:  # noqa: BLE001
        pass


def send_receipted(c, listener, destination, bodies, timeout_s=10):
    """Sends each body with a receipt and waits for all of them."""
    base = len(listener.receipts)
    for i, body in enumerate(bodies):
        c.send(destination=destination, body=body, receipt=f"s{base}-{i}")
    for i in range(len(bodies)):
        check(listener.wait_receipt(f"s{base}-{i}", timeout_s),
              f"no RECEIPT s{base}-{i} for a SEND to {destination} within {timeout_s} s "
              f"(errors: {listener.errors})")


def consume(port, login, passcode, destination, count, timeout_s=20, quiet_s=0.5,
            version="1.2", host="127.0.0.1"):
    """Subscribes through port and collects bodies until count arrived (plus quiet_s for
    extras) or timeout; returns the bodies and the listener's errors."""
    c, listener = stomp_client(port, login, passcode, version, host=host)
    try:
        c.subscribe(destination=destination, id="1", ack="auto")
        deadline = time.monotonic() + timeout_s
        while len(listener.bodies()) < count and time.monotonic() < deadline:
            if listener.errors or listener.disconnected.is_set():
                break
            time.sleep(0.05)
        time.sleep(quiet_s)
        return listener.bodies(), listener.errors
    finally:
        close_quietly(c)


# ---------------------------------------------------------------------------------------------
# Raw STOMP over a socket


def frame(command, headers=(), body=b"", eol=b"\n", content_length=None):
    out = command.encode() + eol
    for k, v in headers:
        out += f"{k}:{v}".encode() + eol
    if content_length is True:
        out += f"content-length:{len(body)}".encode() + eol
    out += eol + body + b"\0"
    return out


class RawFrame:
    def __init__(self, command, headers, body, raw):
        self.command, self.headers, self.body, self.raw = command, headers, body, raw

    def __repr__(self):
        return f"RawFrame({self.command!r}, {self.headers!r}, {self.body[:200]!r})"


class RawStomp:
    """A STOMP client on a plain socket: writes bytes as given, reads frames."""

    def __init__(self, port, timeout_s=10, host="127.0.0.1", source_port=0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s,
                                             source_address=("", source_port) if source_port
                                             else None)
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"timed out reading a frame; have {self.buf[:300]!r}")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise Failure(f"timed out reading a frame; have {self.buf[:300]!r}")
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        self.buf += data

    def read_frame(self, timeout_s=10):
        """The next frame, or None at EOF (a partial frame at EOF is a Failure)."""
        deadline = time.monotonic() + timeout_s
        while True:
            stripped = self.buf.lstrip(b"\r\n")
            if stripped != self.buf:
                self.buf = stripped
            end = self._head_end()
            if end is not None:
                head_len, sep_len = end
                head = self.buf[:head_len].decode("utf-8", "replace")
                lines = head.replace("\r\n", "\n").split("\n")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                start = head_len + sep_len
                if "content-length" in headers:
                    n = int(headers["content-length"])
                    while len(self.buf) < start + n + 1 and not self.eof:
                        self._fill(deadline)
                    check(len(self.buf) >= start + n + 1, f"EOF inside a body: {self.buf!r}")
                    body = self.buf[start:start + n]
                    check(self.buf[start + n:start + n + 1] == b"\0", "no NUL after the body")
                    total = start + n + 1
                else:
                    while b"\0" not in self.buf[start:] and not self.eof:
                        self._fill(deadline)
                    nul = self.buf.find(b"\0", start)
                    check(nul >= 0, f"EOF inside a body: {self.buf!r}")
                    body = self.buf[start:nul]
                    total = nul + 1
                raw = self.buf[:total]
                self.buf = self.buf[total:]
                return RawFrame(lines[0], headers, body, raw)
            if self.eof:
                check(not self.buf, f"EOF inside a frame: {self.buf[:300]!r}")
                return None
            self._fill(deadline)

    def _head_end(self):
        a = self.buf.find(b"\n\n")
        b = self.buf.find(b"\r\n\r\n")
        c = self.buf.find(b"\n\r\n")
        cands = [(x, n) for x, n in ((a, 2), (b, 4), (c, 3)) if x >= 0]
        if not cands:
            return None
        return min(cands)

    def wait_closed(self, timeout_s=10):
        """Reads until EOF; returns the bytes left unread as frames, heart-beat EOLs dropped
        (RabbitMQ ends its frames with NUL LF), normally none."""
        deadline = time.monotonic() + timeout_s
        while not self.eof:
            self._fill(deadline)
        return self.buf.lstrip(b"\r\n")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def disconnect_with_receipt(r, receipt, what, eol=b"\n"):
    """DISCONNECT with a receipt on the RawStomp r: that RECEIPT comes back, then EOF."""
    r.send(frame("DISCONNECT", [("receipt", receipt)], eol=eol))
    f = r.read_frame()
    check(f and f.command == "RECEIPT" and f.headers.get("receipt-id") == receipt,
          f"{what}: got {f}")
    r.wait_closed()


def connect_frame(login, passcode, version="1.2", eol=b"\n", extra=()):
    headers = [("accept-version", version), ("host", "/"), ("login", login),
               ("passcode", passcode), ("heart-beat", "0,0"), *extra]
    return frame("CONNECT", headers, eol=eol)


def raw_connected(port, login, passcode, version="1.2", eol=b"\n"):
    r = RawStomp(port)
    r.send(connect_frame(login, passcode, version, eol))
    f = r.read_frame()
    check(f is not None and f.command == "CONNECTED", f"expected CONNECTED, got {f}")
    return r
