#!/usr/bin/python3
"""Integration test of sluicectl against a real sluiced: every command, as a table and as JSON.

Usage: sluicectl_test.py SLUICED SLUICECTL   (meson passes both executables)

Two loopback listeners that accept and close stand for healthy broker nodes; a third node's port
is closed, so its TCP health probes fail. For `sessions` with workers that did not answer, a
canned loopback HTTP server stands in for the gateway. Everything lives in a temp dir this test
creates (the admin socket, the state dir, the config); sluiced's admin TCP port is a free
loopback port.
Every wait is bounded, and only the sluiced this test started is signalled, by its PID.
"""

import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CALL_TIMEOUT_S = 30  # one sluicectl or sluiced --check-config run
START_TIMEOUT_S = 15  # sluiced answering on its socket
HEALTH_TIMEOUT_S = 15  # probes taking the closed-port node down
STOP_TIMEOUT_S = 10  # SIGTERM to exit
NODE_COLUMNS = ["NAME", "ADDRESS", "WEIGHT", "ADMIN", "HEALTH", "QUEUES", "PROBE_MS", "LAST_ERROR"]


DOC_METRICS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "doc",
                           "metrics.md")


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


class FakeNode:
    """A loopback TCP listener that accepts connections and closes them at once."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=5)
        self.sock.close()


class CannedAdmin:
    """A loopback HTTP server that answers GET /v1/sessions with a fixed body, as a gateway
    whose workers did not all answer in time would; every other path is a 404."""

    def __init__(self, sessions):
        body = json.dumps(sessions).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                ok = self.path.split("?")[0] == "/v1/sessions"
                data = body if ok else b'{"error": "not found"}'
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def free_port():
    """A loopback port nobody listens on (free when probed; the test uses it at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, timeout_s, probe, interval_s=0.05):
    """Calls probe() until it returns something true, at most timeout_s; returns that value."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise Failure(f"timed out after {timeout_s} s waiting for {what}")


def table(text):
    """Rows of a sluicectl table as dicts. Cells are cut at the header's column starts (a queue
    name may hold spaces), which also checks the alignment: each cell starts at its header's
    column, after a blank."""
    lines = [l for l in text.splitlines() if l.strip()]
    check(lines, f"expected a table, got nothing:\n{text}")
    header = lines[0]
    names = header.split()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[1:]:
        for at in starts:
            check(len(line) > at and line[at] != " " and (at == 0 or line[at - 1] == " "),
                  f"row {line!r} is not aligned with header {header!r}")
        cells = [line[a:b].rstrip() for a, b in zip(starts, starts[1:] + [len(line)])]
        rows.append(dict(zip(names, cells)))
    return names, rows


def key_values(text):
    """'key: value' lines as a dict, after checking that the values are aligned."""
    out = {}
    columns = set()
    for line in text.splitlines():
        m = re.match(r"^(\S+):( +)(.*)$", line)
        check(m, f"not a 'key: value' line: {line!r}")
        out[m.group(1)] = m.group(3)
        columns.add(len(m.group(1)) + 1 + len(m.group(2)))
    check(len(columns) == 1, f"values are not aligned:\n{text}")
    return out


class Test:
    def __init__(self, sluiced, sluicectl, tmp):
        self.sluiced = sluiced
        self.sluicectl = sluicectl
        self.tmp = tmp
        self.socket_path = os.path.join(tmp, "admin.sock")
        self.state_dir = os.path.join(tmp, "state")
        self.config_path = os.path.join(tmp, "sluice.toml")
        self.log_path = os.path.join(tmp, "sluiced.log")
        self.admin_port = free_port()
        self.nodes = [FakeNode(), FakeNode()]
        self.closed_port = free_port()
        self.proc = None
        self.log = None
        self.extra_pins = []  # (vhost, queue, node) added to the config by the reload steps

    # ---- helpers -------------------------------------------------------------------------------

    def config_text(self, weight2="100", limits=""):
        pins = "".join(f'\n[[pins]]\nvhost = "{v}"\nqueue = "{q}"\nnode = "{n}"\n'
                       for v, q, n in self.extra_pins)
        limits_section = f"\n[limits]\n{limits}\n" if limits else ""
        return f"""# sluicectl_test.py's gateway
[gateway]
id = "sluicectl-test"
state_dir = "{self.state_dir}"

[listen]
address = "127.0.0.1:{free_port()}"

[admin]
socket = "{self.socket_path}"
tcp = "127.0.0.1:{self.admin_port}"
log_level = "info"

[health]
probe = "tcp"
interval_ms = 200
timeout_ms = 100
rise = 1
fall = 1

[[nodes]]
name = "rabbit1"
address = "127.0.0.1:{self.nodes[0].port}"

[[nodes]]
name = "rabbit2"
address = "127.0.0.1:{self.nodes[1].port}"
weight = {weight2}

[[nodes]]
name = "rabbit3"
address = "127.0.0.1:{self.closed_port}"

[[pins]]
vhost = "/"
queue = "orders"
node = "rabbit1"
{pins}{limits_section}"""

    def write_config(self, path=None, **kw):
        with open(path or self.config_path, "w") as f:
            f.write(self.config_text(**kw))

    def run(self, args, env=None, timeout=CALL_TIMEOUT_S):
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else self.env())

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items() if k != "SLUICE_ADMIN_SOCKET"}
        e.update(extra)
        return e

    def ctl(self, *args, expect=0, where=None, env=None):
        """Runs sluicectl on the test's socket (or `where`: extra leading arguments)."""
        target = where if where is not None else ["--socket", self.socket_path]
        p = self.run([self.sluicectl, *target, *args], env=env)
        shown = " ".join(["sluicectl", *target, *args])
        check(p.returncode == expect,
              f"{shown}: exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\n"
              f"stderr:\n{p.stderr}")
        if expect == 0:
            check(p.stderr == "", f"{shown}: succeeded but wrote to stderr: {p.stderr!r}")
        else:
            self.one_error_line(p, shown)
        return p

    def ctl_json(self, *args, **kw):
        p = self.ctl("--json", *args, **kw)
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError as e:
            raise Failure(f"sluicectl --json {' '.join(args)}: not JSON ({e}):\n{p.stdout}")

    def one_error_line(self, p, shown):
        check(p.stdout == "", f"{shown}: failed but wrote to stdout: {p.stdout!r}")
        check(p.stderr.startswith("sluicectl: ") and p.stderr.endswith("\n")
              and p.stderr.count("\n") == 1,
              f"{shown}: the error must be one 'sluicectl: ' line on stderr, got {p.stderr!r}")

    def fail_with(self, args, code, *needles, **kw):
        """sluicectl args must exit `code` with one error line containing every needle."""
        p = self.ctl(*args, expect=code, **kw)
        for n in needles:
            check(n in p.stderr, f"sluicectl {' '.join(args)}: error {p.stderr!r} lacks {n!r}")
        return p

    def node_rows(self, *where):
        names, rows = table(self.ctl("nodes", where=list(where) or None).stdout)
        check(names == NODE_COLUMNS, f"nodes header is {names}, expected {NODE_COLUMNS}")
        return {r["NAME"]: r for r in rows}

    def queue_rows(self, *args):
        p = self.ctl("queues", *args)
        lines = p.stdout.splitlines()
        footer = None
        if lines and re.match(r"^\d+ of \d+ shown", lines[-1]):
            footer = lines.pop()
        if lines == ["no queues"]:
            return [], footer
        names, rows = table("\n".join(lines))
        check(names == ["VHOST", "QUEUE", "NODE", "SOURCE"], f"queues header is {names}")
        return [(r["VHOST"], r["QUEUE"], r["NODE"], r["SOURCE"]) for r in rows], footer

    # ---- steps -------------------------------------------------------------------------------

    def check_config(self):
        self.write_config()
        p = self.run([self.sluiced, "--check-config", "--config", self.config_path])
        check(p.returncode == 0, f"--check-config of a good config: exit {p.returncode}\n{p.stderr}")
        check("3 nodes, 1 pins" in p.stdout, f"--check-config said {p.stdout!r}")

        broken = os.path.join(self.tmp, "broken.toml")
        self.write_config(broken, weight2="0")
        line = next(i for i, l in enumerate(open(broken), 1) if l.startswith("weight = 0"))
        p = self.run([self.sluiced, "--check-config", "--config", broken])
        check(p.returncode == 2, f"--check-config of a broken config: exit {p.returncode}, "
              f"expected 2\n{p.stderr}")
        check(f"{broken}:{line}: nodes[1].weight" in p.stderr,
              f"the error must name the file, line {line} and nodes[1].weight: {p.stderr!r}")

    def start(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([self.sluiced, "--config", self.config_path],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

        def answering():
            check(self.proc.poll() is None, f"sluiced exited at start with {self.proc.returncode}")
            if not os.path.exists(self.socket_path):
                return False
            p = self.run([self.sluicectl, "--socket", self.socket_path, "status"])
            return p.returncode == 0

        wait_until("sluiced to answer on its admin socket", START_TIMEOUT_S, answering)

    def status(self):
        s = key_values(self.ctl("status").stdout)
        for key, want in [("gateway", "sluicectl-test"), ("nodes", "3"), ("queues", "1"),
                          ("pinned", "1"), ("learned", "0"), ("placed", "0"),
                          ("queues_with_backlog", "0"),
                          ("log_level", "info"), ("placement_policy", "rendezvous"),
                          ("feed", "disabled"), ("workers", "1")]:
            check(s.get(key) == want, f"status {key}: {s.get(key)!r}, expected {want!r}\n{s}")
        check(re.match(r"^\d+\.\d+\.\d+", s.get("version", "")), f"status version: {s}")
        j = self.ctl_json("status")
        check(j["gateway"] == "sluicectl-test" and j["nodes"] == 3 and j["pinned"] == 1
              and j["queues"] == 1 and j["feed"]["enabled"] is False,
              f"status --json: {j}")
        p = self.ctl("status", "--json")
        check(p.stdout.startswith('{\n  "'), f"--json must be pretty with 2 spaces: {p.stdout!r}")

    def health(self):
        def settled():
            nodes = {n["name"]: n for n in self.ctl_json("nodes")["nodes"]}
            ok = (nodes["rabbit3"]["health"] == "down" and nodes["rabbit3"]["probes_failed"] > 0
                  and all(nodes[n]["health"] == "up" and nodes[n]["probes_ok"] > 0
                          for n in ("rabbit1", "rabbit2")))
            return nodes if ok else None

        nodes = wait_until("rabbit3 down and rabbit1, rabbit2 probed up", HEALTH_TIMEOUT_S, settled)
        check(nodes["rabbit1"]["address"] == f"127.0.0.1:{self.nodes[0].port}"
              and nodes["rabbit1"]["queues"] == 1 and nodes["rabbit1"]["admin"] == "up",
              f"nodes --json rabbit1: {nodes['rabbit1']}")
        rows = self.node_rows()
        check(sorted(rows) == ["rabbit1", "rabbit2", "rabbit3"], f"nodes rows: {rows}")
        r1, r3 = rows["rabbit1"], rows["rabbit3"]
        check(r1["ADDRESS"] == f"127.0.0.1:{self.nodes[0].port}" and r1["WEIGHT"] == "100"
              and r1["ADMIN"] == "up" and r1["HEALTH"] == "up" and r1["QUEUES"] == "1"
              and r1["LAST_ERROR"] == "-" and re.match(r"^\d+\.\d$", r1["PROBE_MS"]),
              f"nodes row rabbit1: {r1}")
        check(r3["HEALTH"] == "down" and r3["QUEUES"] == "0"
              and str(self.closed_port) in r3["LAST_ERROR"]
              and "refused" in r3["LAST_ERROR"].lower(), f"nodes row rabbit3: {r3}")
        s = key_values(self.ctl("status").stdout)
        check(s["nodes_up"] == "2", f"status nodes_up after probes: {s['nodes_up']}")

    def node_admin(self):
        p = self.ctl("node", "drain", "rabbit2")
        check(p.stdout == "node rabbit2: admin state drain\n", f"node drain said {p.stdout!r}")
        check(self.node_rows()["rabbit2"]["ADMIN"] == "drain", "nodes does not show the drain")
        j = self.ctl_json("node", "maintenance", "rabbit2")
        check(j["name"] == "rabbit2" and j["admin"] == "maintenance", f"node --json: {j}")
        nodes = {n["name"]: n for n in self.ctl_json("nodes")["nodes"]}
        check(nodes["rabbit2"]["admin"] == "maintenance" and nodes["rabbit1"]["admin"] == "up",
              f"nodes --json after maintenance: {nodes}")
        metrics = self.ctl("metrics").stdout
        check('sluice_node_admin_state{node="rabbit2",state="maintenance"} 1' in metrics,
              "metrics do not show rabbit2 in maintenance")
        p = self.ctl("node", "up", "rabbit2")
        check(p.stdout == "node rabbit2: admin state up\n", f"node up said {p.stdout!r}")
        check(self.node_rows()["rabbit2"]["ADMIN"] == "up", "nodes does not show rabbit2 up")

        self.fail_with(["node", "drain", "rabbit9"], 1, '"rabbit9"', "rabbit1, rabbit2, rabbit3")
        self.fail_with(["--json", "node", "up", "rabbit9"], 1, '"rabbit9"')
        self.fail_with(["node", "sleep", "rabbit1"], 2, '"sleep"')
        self.fail_with(["node", "drain"], 2, "NAME")

    def queues(self):
        p = self.ctl("queue", "pin", "/", "invoices", "rabbit2")
        check(p.stdout == 'queue "invoices" in vhost "/": pinned to rabbit2\n',
              f"queue pin said {p.stdout!r}")
        j = self.ctl_json("queue", "pin", "shop", "carts", "rabbit3")
        check(j["vhost"] == "shop" and j["queue"] == "carts" and j["node"] == "rabbit3"
              and j["source"] == "pinned" and j["pinned"] == "rabbit3", f"queue pin --json: {j}")
        # A name that needs percent-encoding in the query string.
        odd = "a b&c=d?e"
        self.ctl("queue", "pin", "/", odd, "rabbit1")

        s = key_values(self.ctl("queue", "show", "/", "invoices").stdout)
        check(s == {"vhost": "/", "queue": "invoices", "node": "rabbit2", "source": "pinned",
                    "pinned": "rabbit2", "learned": "-", "placed": "-", "backlog": "false"},
              f"queue show: {s}")
        j = self.ctl_json("queue", "show", "/", odd)
        check(j["queue"] == odd and j["node"] == "rabbit1" and j["learned"] is None,
              f"queue show --json of {odd!r}: {j}")

        all_rows = {("/", "orders", "rabbit1", "pinned"), ("/", "invoices", "rabbit2", "pinned"),
                    ("/", odd, "rabbit1", "pinned"), ("shop", "carts", "rabbit3", "pinned")}
        rows, footer = self.queue_rows()
        check(set(rows) == all_rows and footer is None, f"queues: {rows} {footer}")
        rows, _ = self.queue_rows("--vhost", "shop")
        check(rows == [("shop", "carts", "rabbit3", "pinned")], f"queues --vhost shop: {rows}")
        rows, _ = self.queue_rows("--source", "pinned")
        check(set(rows) == all_rows, f"queues --source pinned: {rows}")
        rows, _ = self.queue_rows("--source", "placed")
        check(rows == [], f"queues --source placed: {rows}")
        j = self.ctl_json("queues", "--source", "learned")
        check(j == {"queues": [], "total": 0, "truncated": False}, f"queues --json learned: {j}")
        rows, footer = self.queue_rows("--limit", "2")
        check(len(rows) == 2 and footer is not None and footer.startswith("2 of 4 shown"),
              f"queues --limit 2: {rows} footer {footer!r}")
        j = self.ctl_json("queues", "--vhost", "/", "--limit", "1")
        check(len(j["queues"]) == 1 and j["total"] == 3 and j["truncated"] is True,
              f"queues --json --vhost / --limit 1: {j}")

        p = self.ctl("queue", "unpin", "/", "invoices")
        check(p.stdout.startswith('queue "invoices" in vhost "/": unpinned'),
              f"queue unpin said {p.stdout!r}")
        j = self.ctl_json("queue", "unpin", "/", odd)
        check(j["queue"] == odd and j["pinned"] is None, f"queue unpin --json: {j}")
        self.fail_with(["queue", "unpin", "/", "invoices"], 1, '"invoices"', "not pinned")
        self.fail_with(["queue", "show", "/", "invoices"], 1, '"invoices"', "no owner")
        self.fail_with(["queue", "pin", "/", "x", "rabbit9"], 1, '"rabbit9"')
        self.fail_with(["queue", "pin", "/", "x"], 2, "NODE")
        self.fail_with(["queues", "--source", "guessed"], 2, "guessed")
        self.fail_with(["queues", "--limit", "0"], 2, "--limit")
        rows, _ = self.queue_rows()
        check(set(rows) == {("/", "orders", "rabbit1", "pinned"),
                            ("shop", "carts", "rabbit3", "pinned")}, f"queues after unpin: {rows}")

    def settings(self):
        s = key_values(self.ctl("get").stdout)
        check(s.get("log_level") == "info" and s.get("health.interval_ms") == "200"
              and s.get("health.timeout_ms") == "100" and s.get("health.rise") == "1",
              f"get: {s}")
        j = self.ctl_json("get")
        check(j["settings"]["health.fall"] == "1" and j["settings"]["health.probe"] == "tcp",
              f"get --json: {j}")

        p = self.ctl("set", "log_level", "debug")
        check(p.stdout == "log_level set to debug\n", f"set said {p.stdout!r}")
        check(self.ctl("get", "log_level").stdout == "log_level: debug\n", "get log_level")
        check(self.ctl_json("get", "log_level") == {"key": "log_level", "value": "debug"},
              "get --json log_level")
        check(key_values(self.ctl("status").stdout)["log_level"] == "debug",
              "status does not show the new log level")
        j = self.ctl_json("set", "health.interval_ms", "300")
        check(j == {"key": "health.interval_ms", "value": "300"}, f"set --json: {j}")
        check(self.ctl("get", "health.interval_ms").stdout == "health.interval_ms: 300\n",
              "get health.interval_ms after set")
        self.ctl("set", "health.rise", "2")
        check(self.ctl_json("get")["settings"]["health.rise"] == "2", "health.rise not set")

        self.fail_with(["set", "log_level", "loud"], 1, "log_level", '"debug"')
        self.fail_with(["set", "health.timeout_ms", "300"], 1, "health.timeout_ms",
                       "less than health.interval_ms")
        self.fail_with(["set", "health.rise", "many"], 1, "health.rise", '"many"')
        self.fail_with(["--json", "set", "health.colour", "1"], 1, '"health.colour"')
        self.fail_with(["get", "health.colour"], 1, '"health.colour"')
        self.fail_with(["set", "log_level"], 2, "VALUE")
        check(self.ctl("get", "log_level").stdout == "log_level: debug\n",
              "a refused set changed the setting")

    def metrics(self):
        text = self.ctl("metrics").stdout
        for needle in ["# TYPE sluice_node_up gauge", 'sluice_node_up{node="rabbit1"} 1',
                       'sluice_node_up{node="rabbit3"} 0',
                       'sluice_ownership_entries{source="pinned"} 2']:
            check(needle in text, f"metrics lack {needle!r}")
        j = self.ctl_json("metrics")
        check(j.get('sluice_node_up{node="rabbit2"}') == 1
              and j.get('sluice_node_up{node="rabbit3"}') == 0
              and j.get('sluice_ownership_entries{source="pinned"}') == 2
              and j.get('sluice_ownership_entries{source="placed"}') == 0,
              f"metrics --json: {dict(list(j.items())[:12])}")
        changes = j.get('sluice_admin_changes_total{kind="node_admin_state"}')
        check(isinstance(changes, int) and changes == 3, f"admin changes: {changes!r}")
        check(not any(k.startswith("#") for k in j), "metrics --json kept comment lines")
        check(isinstance(j.get("sluice_start_time_seconds"), (int, float)),
              "sluice_start_time_seconds is not a number")
        # Every family served is documented.
        families = re.findall(r"^# TYPE (\S+) ", text, re.M)
        with open(DOC_METRICS, encoding="utf-8") as f:
            doc = f.read()
        missing = [name for name in families if f"`{name}`" not in doc]
        check(len(families) > 40 and not missing,
              f"doc/metrics.md does not list {missing} (of {len(families)} families served)")

    def reload(self):
        self.extra_pins.append(("/", "reloaded", "rabbit2"))
        self.write_config()
        p = self.ctl("reload")
        check(p.stdout == "config reloaded\n", f"reload said {p.stdout!r}")
        j = self.ctl_json("queue", "show", "/", "reloaded")
        check(j["node"] == "rabbit2" and j["source"] == "pinned", f"pin after reload: {j}")
        # The reload applies the file's log level and health settings again.
        check(self.ctl("get", "log_level").stdout == "log_level: info\n", "reload kept log_level")
        check(self.ctl_json("get")["settings"]["health.interval_ms"] == "200",
              "reload kept health.interval_ms")

        # The live limits apply on reload; sessions_max above its value at start (the default
        # 10,000) waits for a restart, and the log says why.
        self.write_config(limits="sessions_max = 5000\nsessions_per_source_max = 7")
        self.ctl("reload")
        settings = self.ctl_json("get")["settings"]
        check(settings["limits.sessions_max"] == "5000"
              and settings["limits.sessions_per_source_max"] == "7",
              f"limits after reload: {settings}")
        self.write_config(limits="sessions_max = 20000\nsessions_per_source_max = 7")
        self.ctl("reload")
        check(self.ctl_json("get", "limits.sessions_max")["value"] == "5000",
              "sessions_max above its start value applied")
        self.log.flush()
        wait_until("the restart-needed line for limits.sessions_max", 5, lambda: any(
            "config_change_needs_restart" in line and "limits.sessions_max: 20000 is above 10000"
            in line for line in open(self.log_path, errors="replace")))
        self.write_config()  # back to the defaults, which apply again
        self.ctl("reload")
        check(self.ctl_json("get", "limits.sessions_max")["value"] == "10000",
              "limits.sessions_max back to its default on reload")

        broken = self.config_text(weight2="0")
        with open(self.config_path, "w") as f:
            f.write(broken)
        self.fail_with(["reload"], 1, "nodes[1].weight", "running config stays")
        self.fail_with(["--json", "reload"], 1, "nodes[1].weight")

        self.extra_pins.append(("shop", "hup", "rabbit3"))
        self.write_config()
        self.proc.send_signal(signal.SIGHUP)

        def hup_applied():
            p = self.run([self.sluicectl, "--socket", self.socket_path, "--json", "queue", "show",
                          "shop", "hup"])
            return p.returncode == 0 and json.loads(p.stdout)

        j = wait_until("the pin added before SIGHUP", START_TIMEOUT_S, hup_applied)
        check(j["node"] == "rabbit3" and j["source"] == "pinned", f"pin after SIGHUP: {j}")
        check(self.ctl_json("reload") == {"reloaded": True}, "reload --json")
        m = self.ctl_json("metrics")
        check(m.get('sluice_config_reloads_total{result="refused"}') == 2
              and m.get('sluice_config_reloads_total{result="ok"}') == 6,
              "reload counters: " + str({k: v for k, v in m.items() if "reloads" in k}))

    def endpoints(self):
        tcp = ["--tcp", f"127.0.0.1:{self.admin_port}"]
        by_tcp = self.ctl_json("status", where=tcp)
        by_unix = self.ctl_json("status")
        for key in ("gateway", "nodes", "queues", "pinned", "started"):
            check(by_tcp[key] == by_unix[key], f"--tcp status {key}: {by_tcp[key]!r} vs "
                  f"{by_unix[key]!r}")
        check(sorted(self.node_rows(*tcp)) == ["rabbit1", "rabbit2", "rabbit3"], "--tcp nodes")
        check(self.ctl("queue", "show", "/", "orders", where=tcp).stdout
              == self.ctl("queue", "show", "/", "orders").stdout, "--tcp queue show")
        self.fail_with(["status"], 2, "--tcp", where=[*tcp, "--socket", self.socket_path])
        self.fail_with(["status"], 2, "HOST:PORT", where=["--tcp", "127.0.0.1"])

        # SLUICE_ADMIN_SOCKET replaces the default; --socket wins over it.
        missing = os.path.join(self.tmp, "missing.sock")
        p = self.ctl("status", where=[], env=self.env(SLUICE_ADMIN_SOCKET=self.socket_path))
        check("gateway:" in p.stdout, "status through SLUICE_ADMIN_SOCKET")
        self.ctl("status", env=self.env(SLUICE_ADMIN_SOCKET=missing))
        self.fail_with(["status"], 3, missing, "is sluiced running?", where=[],
                       env=self.env(SLUICE_ADMIN_SOCKET=missing))

    def sessions_with_unanswered_workers(self):
        """Workers that did not answer are named after the table, on stdout (the call worked)."""
        row = {"worker": 0, "id": 7, "client": "127.0.0.1:40000", "vhost": "/", "queue": "orders",
               "owner": "rabbit1", "state": "spliced", "bytes_in": 10, "bytes_out": 20,
               "age_ms": 1500}
        cases = [
            ({"total": 1, "truncated": False, "unanswered_workers": [1, 3], "sessions": [row]},
             "workers 1, 3 did not answer in time: their sessions are not listed or counted\n"),
            ({"total": 0, "truncated": False, "unanswered_workers": [2], "sessions": []},
             "no sessions\nworker 2 did not answer in time: its sessions are not listed or "
             "counted\n"),
            ({"total": 1, "truncated": False, "unanswered_workers": [], "sessions": [row]}, None),
            ({"total": 1, "truncated": False, "unanswered_workers": [],
              "sessions": [dict(row, parked=True)]}, None),
        ]
        for answer, note in cases:
            admin = CannedAdmin(answer)
            try:
                where = ["--tcp", f"127.0.0.1:{admin.port}"]
                out = self.ctl("sessions", where=where).stdout
                if note is None:
                    check("did not answer" not in out, f"sessions: a note with none missing:\n{out}")
                else:
                    check(out.endswith(note), f"sessions: expected the note {note!r} last:\n{out}")
                if answer["sessions"]:
                    check("orders" in out and "rabbit1" in out, f"sessions: no row:\n{out}")
                    # A parked session's state reads spliced/parked; any other, its state alone.
                    parked = answer["sessions"][0].get("parked", False)
                    cells = out.split()
                    want, other = ("spliced/parked", "spliced") if parked else \
                        ("spliced", "spliced/parked")
                    check(want in cells and other not in cells,
                          f"sessions: state column should read {want}:\n{out}")
                j = self.ctl_json("sessions", where=where)
                check(j["unanswered_workers"] == answer["unanswered_workers"],
                      f"sessions --json: {j}")
            finally:
                admin.stop()

    def unreachable_and_usage(self):
        missing = os.path.join(self.tmp, "missing.sock")
        for args in (["status"], ["--json", "nodes"], ["node", "drain", "rabbit1"]):
            self.fail_with(args, 3, f"cannot connect to sluiced at {missing}",
                           "is sluiced running?", where=["--socket", missing])
        self.fail_with(["status"], 3, "is sluiced running?",
                       where=["--tcp", f"127.0.0.1:{self.closed_port}"])
        self.fail_with(["frobnicate"], 2, '"frobnicate"', "status")
        self.fail_with([], 2, "needs a command")
        self.fail_with(["queue"], 2, "show, pin, unpin")
        self.fail_with(["status", "--colour"], 2, "--colour")
        self.fail_with(["--timeout-ms", "0", "status"], 2, "--timeout-ms")
        p = self.run([self.sluicectl, "--help"])
        check(p.returncode == 0 and "Exit codes" in p.stdout and "  3  " in p.stdout,
              f"--help: exit {p.returncode}\n{p.stdout}")
        check(all(c in p.stdout for c in ("status", "nodes", "queues", "metrics", "reload")),
              "--help does not list the commands")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Failure(f"sluiced did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
        check(code == 0, f"sluiced exited with {code} after SIGTERM, expected 0")
        check(not os.path.exists(self.socket_path), "sluiced left its admin socket behind")
        state = os.path.join(self.state_dir, "ownership")
        check(os.path.exists(state), f"no state file {state}")
        text = open(state).read()
        for line in ["pinned / orders rabbit1", "pinned shop carts rabbit3",
                     "pinned / reloaded rabbit2", "pinned shop hup rabbit3"]:
            check(line + "\n" in text, f"state file lacks {line!r}:\n{text}")
        check("invoices" not in text, f"state file keeps the unpinned queue:\n{text}")

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # our own child, by its PID
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self.log is not None:
            self.log.close()
        for n in self.nodes:
            n.stop()


def main():
    if len(sys.argv) != 3:
        print("usage: sluicectl_test.py SLUICED SLUICECTL", file=sys.stderr)
        return 2
    sluiced, sluicectl = (os.path.abspath(a) for a in sys.argv[1:3])
    # The admin socket's path must fit in sun_path (107 bytes): stay short whatever TMPDIR is.
    base = None if len(tempfile.gettempdir()) < 40 else "/tmp"
    with tempfile.TemporaryDirectory(prefix="sluicectl-", dir=base) as tmp:
        t = Test(sluiced, sluicectl, tmp)
        steps = [t.check_config, t.start, t.status, t.health, t.node_admin, t.queues,
                 t.settings, t.metrics, t.reload, t.endpoints, t.sessions_with_unanswered_workers,
                 t.unreachable_and_usage, t.stop]
        try:
            for step in steps:
                step()
                print(f"ok: {step.__name__}", flush=True)
        except (Failure, subprocess.TimeoutExpired, KeyError, json.JSONDecodeError) as e:
            print(f"FAILED in {step.__name__}: {type(e).__name__}: {e}", flush=True)
            t.cleanup()  # sluiced must have stopped writing before its log is shown
            if os.path.exists(t.log_path):
                print("---- sluiced log ----")
                print(open(t.log_path, errors="replace").read())
            return 1
        finally:
            t.cleanup()
    print(f"PASSED: {len(steps)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
