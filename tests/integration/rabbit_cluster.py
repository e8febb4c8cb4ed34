#!/usr/bin/python3
"""Starts, joins, inspects and stops a real local RabbitMQ cluster for Sluice's integration tests.

Library use (one cluster per test run where possible, DESIGN.md section 8):

    from rabbit_cluster import shared_cluster
    cluster = shared_cluster(nodes=2)      # attaches to $SLUICE_RABBIT_CLUSTER or starts one
    cluster.nodes[1]["stomp_port"]         # node indices are 0-based; names are 1-based

Command line, so that a test runner starts one cluster for all tests:

    /usr/bin/python3 rabbit_cluster.py start --dir D --state FILE [--nodes N]
    SLUICE_RABBIT_CLUSTER=FILE run-the-tests
    /usr/bin/python3 rabbit_cluster.py stop --state FILE

How it runs the brokers, and why:
- /usr/lib/rabbitmq/bin/rabbitmq-server and .../rabbitmqctl directly: Debian's /usr/sbin
  wrappers switch to the rabbitmq user, whose HOME (and so Erlang cookie) is not ours.
- Every node gets its own mnesia, log, config, plugins and env file under base_dir, and one HOME
  under base_dir holds the shared Erlang cookie. /etc/rabbitmq is never read.
- Its own epmd on a private port (ERL_EPMD_PORT): node names like sluice1@localhost then cannot
  clash with another cluster on this host (another test run, or a default install on 4369), and
  the epmd we stop at teardown is always one we started.
- All ports come from one probed block below the ephemeral range (32768+), away from the
  defaults 4369, 5672, 15672, 25672, 35672-35682 (rabbitmqctl's own distribution ports, which
  we also move into the block) and 61613. A flock per block keeps two concurrent starts apart.
- Every process we spawn carries SLUICE_RABBIT_BASE_DIR=<base_dir> in its environment. That is
  how leftovers of a crashed run are found and ended: by PID, only when the marker matches.
- A node per network namespace (node_netns, node_addresses; the DPDK engine's integration test):
  the nodes are named by their addresses (sluice1@10.77.2.10, long names, for rabbitmqctl too),
  each namespace runs its own epmd on the block's port, listening on loopback and the node's
  address, and the Erlang distribution listens on the node's address, so that the nodes join
  over the link between their namespaces. (On loopback only, as in one namespace, the other
  node could not reach it; an epmd on loopback only stops a node named by an address from
  booting.) Each node's AMQP, STOMP and HTTP ports stay on its namespace's loopback, reached
  from there (`ip netns exec`, netns_util.netns).
"""

import argparse
import base64
import concurrent.futures
import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from exit_cleanup import run_at_exit

RABBITMQ_BIN_DIR = "/usr/lib/rabbitmq/bin"
RABBITMQ_SERVER = os.path.join(RABBITMQ_BIN_DIR, "rabbitmq-server")
RABBITMQCTL = os.path.join(RABBITMQ_BIN_DIR, "rabbitmqctl")
EPMD = "/usr/bin/epmd"

# Environment variable naming a state file written by RabbitCluster.save(): tests attach to it.
SHARED_STATE_ENV = "SLUICE_RABBIT_CLUSTER"
# Set to keep the temp dir (logs) of a private cluster after the process exits.
KEEP_DIR_ENV = "SLUICE_RABBIT_KEEP_DIR"
# Put into the environment of every process we spawn; value: the real path of base_dir.
MARKER_ENV = "SLUICE_RABBIT_BASE_DIR"
# base_dir holds this file once we own it; only such a directory is ever wiped.
OWNER_MARKER_FILE = ".sluice-rabbit-cluster"
STATE_FILE_NAME = "cluster.json"
PASSCODE_FILE_NAME = "sluice.passcode"
STATE_FORMAT = 2  # 2: one epmd per namespace ("epmds")

LOGIN = "sluice"
PLUGINS = ("rabbitmq_stomp", "rabbitmq_management")
NODES_MAX = 8
DEFAULT_BASE_PORT = 27100
PORT_PROBE_LIMIT = 32000  # stay below the ephemeral range (ip_local_port_range starts at 32768)
# Port block layout relative to its base B: B epmd, B+1..B+CTL_DIST_PORTS rabbitmqctl's own
# distribution ports, then per node i (0-based) B+10*(i+1) + the offsets below.
CTL_DIST_PORTS = 9
PORTS_PER_NODE = 10
AMQP_OFFSET, STOMP_OFFSET, MGMT_OFFSET, DIST_OFFSET = 0, 1, 2, 3
PORT_LOCK_DIR = os.path.join(tempfile.gettempdir(), "sluice-rabbit-ports")

# Loopback only: an http_proxy in the environment must not see our management API calls.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

LOG_TAIL_LINES = 40
HTTP_TIMEOUT_S = 10.0
CTL_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2
STOP_WAIT_S = 30.0
KILL_WAIT_S = 10.0


class ClusterError(RuntimeError):
    """A cluster operation failed; the message names the node, port or file involved."""


def _say(message):
    print(f"[rabbit_cluster] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Processes and ports


def _pid_alive(pid):
    """True while pid exists and is not a zombie (orphans are reaped late by PID 1 here)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2 :][:1]
    return state not in (b"Z", b"X")


def _pid_has_marker(pid, marker):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    return f"{MARKER_ENV}={marker}".encode() in entries


def _marked_pids(marker):
    """PIDs of live processes whose environment carries our marker for this base_dir."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            pid = int(entry)
            if _pid_has_marker(pid, marker) and _pid_alive(pid):
                pids.append(pid)
    return sorted(pids)


def _wait_pid_gone(pid, timeout_s, child=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap our own child, or it stays a zombie
        if not _pid_alive(pid):
            return True
        time.sleep(POLL_INTERVAL_S)
    return not _pid_alive(pid)


def _end_pid(pid, marker, what, child=None, term_wait_s=KILL_WAIT_S):
    """SIGTERM then SIGKILL one of our processes. Returns a problem string or None."""
    if not _pid_alive(pid):
        if child is not None:
            child.poll()
        return None
    if not _pid_has_marker(pid, marker):
        return f"{what}: pid {pid} is alive but is not ours (no {MARKER_ENV}); left alone"
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return None
        if _wait_pid_gone(pid, wait_s, child):
            return None if sig == signal.SIGTERM else f"{what}: pid {pid} needed SIGKILL"
    return f"{what}: pid {pid} survived SIGKILL for {KILL_WAIT_S:.0f} s"


def _end_marked(marker, pids, what):
    """SIGTERM a group of our processes at once, SIGKILL what is left. Returns problems."""
    pids = [p for p in pids if _pid_has_marker(p, marker)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(POLL_INTERVAL_S)
        pids = [p for p in pids if _pid_alive(p)]
        if not pids:
            return []
    return [f"{what}: pids {pids} survived SIGKILL"]


def _port_free(port):
    # SO_REUSEADDR like Erlang's listeners: TIME_WAIT leftovers do not count, listeners do.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_answers(port, timeout_s=1.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _tail(path, lines=LOG_TAIL_LINES):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"    (cannot read {path}: {e.strerror})"
    body = "\n".join("    " + line for line in text.splitlines()[-lines:])
    return body or f"    ({path} is empty)"


def _first_errors(path, lines=12):
    """The first [error] lines of a file: a failed boot names its cause there, not at the end."""
    try:
        with open(path, "rb") as f:
            text = f.read(256 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""
    found = [line for line in text.splitlines() if "[error]" in line or "Error" in line]
    return "\n".join("    " + line for line in found[:lines])


def _clean_env():
    # The caller's RABBITMQ_*/ERL_* settings must not leak into our nodes or CLI calls.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env.pop(SHARED_STATE_ENV, None)
    return env


# ---------------------------------------------------------------------------------------------
# The cluster


class RabbitCluster:
    """A local RabbitMQ cluster: nodes sluice1@HOST .. sluiceN@HOST, all state under base_dir.

    Node indices in every method are 0-based (index 1 is sluice2). `nodes`, `mgmt_url()` and the
    passcode are available after start() or attach().
    """

    def __init__(self, base_dir, nodes=2, base_port=DEFAULT_BASE_PORT, host="localhost",
                 name_prefix="sluice", epmd_port=None, verbose=True, netns=None,
                 stomp_addresses=None, node_netns=None, node_addresses=None):
        """netns: run every node, epmd and rabbitmqctl inside that network namespace (`ip netns
        exec`), and reach their ports from inside it (netns_util.netns). stomp_addresses: per
        node an extra STOMP listener "IP:PORT" (e.g. an address of a veth in netns), besides
        the loopback one every node has.

        node_netns and node_addresses (both or neither, instead of netns): each node in its own
        namespace, named by its address there (long names: sluice1@10.77.2.10), and the nodes
        clustered over the link between the namespaces. Each namespace gets its own epmd, on
        the same port and listening on loopback and the node's address; the Erlang
        distribution listens on the node's address (not on loopback, where the other node
        cannot reach it). The nodes' AMQP, STOMP and HTTP ports stay on each namespace's
        loopback (and stomp_addresses)."""
        if not 1 <= int(nodes) <= NODES_MAX:
            raise ValueError(f"nodes must be 1 to {NODES_MAX}, got {nodes}")
        if not 1024 <= int(base_port) <= 65535:
            raise ValueError(f"base_port must be 1024 to 65535, got {base_port}")
        self.base_dir = os.path.realpath(base_dir)
        self.node_count = int(nodes)
        self.base_port = int(base_port)
        self.host = host
        self.name_prefix = name_prefix
        self.verbose = verbose
        self.netns = netns
        if stomp_addresses is not None and len(stomp_addresses) != int(nodes):
            raise ValueError(f"stomp_addresses must name {nodes} addresses, got "
                             f"{stomp_addresses}")
        self.stomp_addresses = list(stomp_addresses) if stomp_addresses else None
        if (node_netns is None) != (node_addresses is None) or (node_netns and netns):
            raise ValueError("node_netns and node_addresses go together, and not with netns")
        for what, v in (("node_netns", node_netns), ("node_addresses", node_addresses)):
            if v is not None and len(v) != int(nodes):
                raise ValueError(f"{what} must name {nodes} entries, got {v}")
        self.node_netns = list(node_netns) if node_netns else None
        self.node_addresses = list(node_addresses) if node_addresses else None
        self.owned = True  # False when attached to a cluster another process started
        self.boot_s = None  # wall time of the last start(): boot, join and user set-up
        self.node_boot_s = []  # per node: spawn until its AMQP, STOMP and HTTP ports answered
        self.phase_s = {}  # seconds per phase of the last start()
        self._epmd_port_wanted = epmd_port
        # One per namespace the nodes run in: {"port", "pid", "started_by_us", "node"} (the
        # node whose namespace it serves); all on the same port.
        self._epmds = []
        self._ctl_ports = None
        self._nodes = None  # list of dicts, see _lay_out()
        self._children = {}  # pid -> Popen, for the processes this object spawned
        self._stopped = False
        self._lock = threading.Lock()

    # -- description ---------------------------------------------------------------------------

    @property
    def marker(self):
        return self.base_dir

    @property
    def nodes(self):
        """[{name, amqp_port, stomp_port, mgmt_port, dist_port, stomp_address}] in node index
        order; stomp_address is the extra listener "IP:PORT" or None."""
        self._require_ports()
        keys = ("name", "amqp_port", "stomp_port", "mgmt_port", "dist_port")
        return [{**{k: n[k] for k in keys}, "stomp_address": n.get("stomp_address")}
                for n in self._nodes]

    @property
    def node_names(self):
        self._require_ports()
        return [n["name"] for n in self._nodes]

    @property
    def epmd_port(self):
        self._require_ports()
        return self._epmds[0]["port"]

    @property
    def passcode_file(self):
        return os.path.join(self.base_dir, PASSCODE_FILE_NAME)

    @property
    def login(self):
        return LOGIN

    @property
    def passcode(self):
        try:
            with open(self.passcode_file, encoding="ascii") as f:
                return f.read().strip()
        except OSError as e:
            raise ClusterError(f"cannot read the passcode file {self.passcode_file}: "
                               f"{e.strerror}; was the cluster started?") from e

    def mgmt_url(self, i):
        return f"http://127.0.0.1:{self._node(i)['mgmt_port']}"

    def log_file(self, i):
        return self._node(i)["log_file"]

    def describe(self):
        """Human-readable lines: nodes, ports and files (for test output and the CLI)."""
        self._require_ports()
        lines = [f"base_dir {self.base_dir}",
                 *(f"epmd 127.0.0.1:{e['port']} in the namespace of node {e['node']}, pid "
                   f"{e['pid']} (started by us: {e['started_by_us']})" for e in self._epmds),
                 f"rabbitmqctl distribution ports {self._ctl_ports[0]}-{self._ctl_ports[1]}",
                 f"management login {LOGIN}, passcode file {self.passcode_file}"]
        for i, n in enumerate(self._nodes):
            lines.append(f"node {i} {n['name']}: amqp {n['amqp_port']} stomp {n['stomp_port']} "
                         f"http {n['mgmt_port']} dist {n['dist_port']} beam pid {n['beam_pid']} "
                         f"log {n['log_file']}")
        return lines

    def node_rss_kb(self, i):
        """Resident memory of node i's Erlang VM in kB, or None when it is not running."""
        pid = self._node(i)["beam_pid"]
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, TypeError):
            pass
        return None

    def __repr__(self):
        names = self.node_names if self._nodes else []
        return f"RabbitCluster({self.base_dir!r}, nodes={names}, owned={self.owned})"

    # -- state file ----------------------------------------------------------------------------

    def save(self, path):
        """Writes the JSON state file that attach(), shared_cluster() and `stop` read."""
        self._require_ports()
        state = {"format": STATE_FORMAT, "base_dir": self.base_dir, "host": self.host,
                 "name_prefix": self.name_prefix, "base_port": self.base_port,
                 "epmds": self._epmds,
                 "node_netns": self.node_netns, "node_addresses": self.node_addresses,
                 "ctl_dist_ports": list(self._ctl_ports),
                 "login": LOGIN, "passcode_file": self.passcode_file,
                 "boot_s": self.boot_s, "node_boot_s": self.node_boot_s,
                 "phase_s": self.phase_s, "netns": self.netns,
                 "nodes": self._nodes}
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)

    @classmethod
    def attach(cls, path, verbose=True):
        """A RabbitCluster for the running cluster described by a state file (owned=False)."""
        try:
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
        except OSError as e:
            raise ClusterError(f"cannot read cluster state file {path}: {e.strerror}") from e
        except ValueError as e:
            raise ClusterError(f"cluster state file {path} is not valid JSON: {e}") from e
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ClusterError(f"cluster state file {path} has no \"format\": {STATE_FORMAT}; "
                               f"write it with `rabbit_cluster.py start --state {path}`")
        try:
            c = cls(state["base_dir"], nodes=len(state["nodes"]), base_port=state["base_port"],
                    host=state["host"], name_prefix=state["name_prefix"], verbose=verbose,
                    netns=state.get("netns"), node_netns=state.get("node_netns"),
                    node_addresses=state.get("node_addresses"))
            c._epmds = [dict(e) for e in state["epmds"]]
            c._ctl_ports = tuple(state["ctl_dist_ports"])
            c._nodes = [dict(n) for n in state["nodes"]]
            c.boot_s = state.get("boot_s")
            c.node_boot_s = state.get("node_boot_s") or []
            c.phase_s = state.get("phase_s") or {}
        except (KeyError, TypeError, ValueError) as e:
            raise ClusterError(f"cluster state file {path} lacks or mangles field {e}") from e
        c.owned = False
        return c

    # -- start ---------------------------------------------------------------------------------

    def start(self, timeout_s=90):
        """Boots all nodes in parallel, clusters them, creates the test user. Idempotent.

        A base_dir with leftovers of an earlier run (live processes carrying our marker, old
        mnesia) is cleaned first. On failure everything started is stopped again and a
        ClusterError names the node and quotes the tail of its log.
        """
        if self._nodes and not self._stopped and self._all_running():
            return self
        started = time.monotonic()
        deadline = started + timeout_s
        self._stopped = False
        self.owned = True
        try:
            self._prepare_base_dir()
            with self._claim_port_block() as block:
                self._lay_out(block)
                self._write_files()
                phases = [("epmd", lambda: self._start_epmd(deadline)),
                          ("spawn", self._spawn_nodes),
                          ("boot", lambda: self._wait_booted(deadline)),
                          ("await_startup", lambda: self._await_startup_all(deadline)),
                          ("join", lambda: [self._join(i, deadline)
                                            for i in range(1, self.node_count)]),
                          ("cluster_status", lambda: self._wait_running_nodes(self.node_names,
                                                                              deadline)),
                          ("user", lambda: self._create_user(deadline))]
                self.phase_s = {}
                for phase, run in phases:
                    t0 = time.monotonic()
                    run()
                    self.phase_s[phase] = round(time.monotonic() - t0, 1)
        except BaseException:
            problems = self.stop(quiet=True)
            for p in problems:
                _say(f"cleanup after failed start: {p}")
            raise
        self.boot_s = time.monotonic() - started
        self.save(os.path.join(self.base_dir, STATE_FILE_NAME))
        self._log(f"cluster up in {self.boot_s:.1f} s: " + ", ".join(self.node_names)
                  + " (" + ", ".join(f"{k} {v} s" for k, v in self.phase_s.items()) + ")")
        return self

    def _prepare_base_dir(self):
        os.makedirs(self.base_dir, exist_ok=True)
        leftovers = _marked_pids(self.marker)
        if leftovers:
            self._log(f"ending processes {leftovers} left by an earlier run in {self.base_dir}")
        problems = _end_marked(self.marker, leftovers, "leftovers")
        if problems:
            raise ClusterError("cannot clean " + self.base_dir + ": " + "; ".join(problems))
        entries = os.listdir(self.base_dir)
        if entries and OWNER_MARKER_FILE not in entries:
            raise ClusterError(f"{self.base_dir} is not empty and was not made by "
                               f"rabbit_cluster.py (no {OWNER_MARKER_FILE}); refusing to wipe "
                               f"it: pass an empty or new directory")
        for entry in entries:
            path = os.path.join(self.base_dir, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        with open(os.path.join(self.base_dir, OWNER_MARKER_FILE), "w") as f:
            f.write("made by tests/integration/rabbit_cluster.py; wiped on every start\n")

    @contextlib.contextmanager
    def _claim_port_block(self):
        """Yields the base of a block of free ports, flock-ed against concurrent starts."""
        os.makedirs(PORT_LOCK_DIR, exist_ok=True)
        size = PORTS_PER_NODE * (self.node_count + 1)
        base = self.base_port
        limit = max(PORT_PROBE_LIMIT, self.base_port + size)
        tried = []
        while base + size <= min(limit, 65536):
            lock = open(os.path.join(PORT_LOCK_DIR, f"{base}.lock"), "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                lock.close()
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
                tried.append(f"{base} (claimed by a concurrent start)")
                base += size
                continue
            busy = []
            for i in self._namespace_nodes():
                with self.in_netns(i):
                    busy += [p for p in self._block_ports(base) if not _port_free(p)]
            if busy:
                lock.close()
                tried.append(f"{base} (ports in use: {busy[:4]})")
                base += size
                continue
            try:
                self._log(f"port block {base}-{base + size - 1}")
                yield base
            finally:
                lock.close()
            return
        raise ClusterError(f"no free block of {size} ports on 127.0.0.1 from {self.base_port} "
                           f"to {limit}; tried: {', '.join(tried[:6])}")

    def _block_ports(self, base):
        ports = [base] if self._epmd_port_wanted is None else []
        ports += range(base + 1, base + 1 + CTL_DIST_PORTS)
        for i in range(self.node_count):
            first = base + PORTS_PER_NODE * (i + 1)
            ports += [first + o for o in (AMQP_OFFSET, STOMP_OFFSET, MGMT_OFFSET, DIST_OFFSET)]
        return ports

    def _lay_out(self, base):
        epmd_port = base if self._epmd_port_wanted is None else int(self._epmd_port_wanted)
        self._epmds = [{"port": epmd_port, "pid": None, "started_by_us": False, "node": i}
                       for i in self._namespace_nodes()]
        self._ctl_ports = (base + 1, base + CTL_DIST_PORTS)
        self._nodes = []
        for i in range(self.node_count):
            first = base + PORTS_PER_NODE * (i + 1)
            host = self.node_addresses[i] if self.node_addresses else self.host
            name = f"{self.name_prefix}{i + 1}@{host}"
            node_dir = os.path.join(self.base_dir, f"{self.name_prefix}{i + 1}")
            self._nodes.append({
                "name": name, "amqp_port": first + AMQP_OFFSET, "stomp_port": first + STOMP_OFFSET,
                "mgmt_port": first + MGMT_OFFSET, "dist_port": first + DIST_OFFSET,
                "stomp_address": self.stomp_addresses[i] if self.stomp_addresses else None,
                "dir": node_dir, "log_file": os.path.join(node_dir, "log", f"{name}.log"),
                "stdout_file": os.path.join(node_dir, "stdout.log"),
                "pid_file": os.path.join(node_dir, "rabbitmq.pid"),
                "address": self.node_addresses[i] if self.node_addresses else None,
                "wrapper_pid": None, "beam_pid": None})
        self.node_boot_s = [None] * self.node_count

    def _home(self):
        return os.path.join(self.base_dir, "home")

    def _write_files(self):
        home = self._home()
        os.makedirs(home)
        cookie = os.path.join(home, ".erlang.cookie")
        # Written before any node starts: two nodes creating it at once could disagree.
        fd = os.open(cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as f:
            f.write("".join(secrets.choice(string.ascii_uppercase) for _ in range(32)))
        open(self._empty_env_file(), "w").close()
        for n in self._nodes:
            os.makedirs(os.path.join(n["dir"], "log"))
            with open(os.path.join(n["dir"], "rabbitmq.conf"), "w") as f:
                f.write(f"# {n['name']}: written by rabbit_cluster.py\n"
                        f"stomp.listeners.tcp.1 = 127.0.0.1:{n['stomp_port']}\n"
                        + (f"stomp.listeners.tcp.2 = {n['stomp_address']}\n"
                           if n["stomp_address"] else "") +
                        f"management.tcp.ip = 127.0.0.1\n"
                        f"management.tcp.port = {n['mgmt_port']}\n"
                        # Fresher message counts in /api/queues for tests (default 5000).
                        "collect_statistics_interval = 1000\n"
                        "log.console = false\n"
                        "log.file.level = info\n")
            with open(os.path.join(n["dir"], "enabled_plugins"), "w") as f:
                f.write("[" + ",".join(PLUGINS) + "].\n")
            open(os.path.join(n["dir"], "rabbitmq-env.conf"), "w").close()

    def _empty_env_file(self):
        return os.path.join(self._home(), "rabbitmq-env.conf")

    def _base_env(self):
        env = _clean_env()
        env.update({
            "HOME": self._home(),
            MARKER_ENV: self.marker,
            "ERL_EPMD_PORT": str(self._epmds[0]["port"]),
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self._ctl_ports[0]),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self._ctl_ports[1]),
            "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_CONF_ENV_FILE": self._empty_env_file(),
        })
        if self.node_addresses:
            # Names with addresses are long names, for rabbitmqctl too; its own distribution
            # port need not be on loopback (it only connects out).
            env["RABBITMQ_USE_LONGNAME"] = "true"
            env["RABBITMQ_CTL_ERL_ARGS"] = ""
        return env

    def ctl_env(self):
        """Environment under which rabbitmqctl (RABBITMQCTL) reaches these nodes."""
        self._require_ports()
        return self._base_env()

    def _node_env(self, n):
        env = self._base_env()
        env.update({
            "RABBITMQ_NODENAME": n["name"],
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(n["amqp_port"]),
            "RABBITMQ_DIST_PORT": str(n["dist_port"]),
            "RABBITMQ_MNESIA_BASE": os.path.join(n["dir"], "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(n["dir"], "log"),
            "RABBITMQ_CONFIG_FILE": os.path.join(n["dir"], "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(n["dir"], "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(n["dir"], "enabled_plugins"),
            "RABBITMQ_PID_FILE": n["pid_file"],
            "RABBITMQ_CONF_ENV_FILE": os.path.join(n["dir"], "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface "
                                                   + self._dist_interface(n),
        })
        return env

    def _dist_interface(self, n):
        """The address the node's Erlang distribution listens on, as an Erlang tuple."""
        address = n.get("address") or "127.0.0.1"
        return "{" + address.replace(".", ",") + "}"

    def _start_epmd(self, deadline):
        for e in self._epmds:
            self._start_one_epmd(e, deadline)

    def _start_one_epmd(self, epmd, deadline):
        """Starts the epmd of one namespace (that of node epmd["node"])."""
        port, i = epmd["port"], epmd["node"]
        addresses = "127.0.0.1"
        if self.node_addresses:
            addresses += "," + self.node_addresses[i]
        log = os.path.join(self.base_dir, "epmd.log" if i == 0 else f"epmd{i + 1}.log")
        if self._answers(port, i=i):
            # Only when the caller asked for a specific epmd_port that already has a daemon.
            self._log(f"using the epmd already listening on {port}; it will be left running")
            return
        out = open(log, "w")
        with out:
            child = subprocess.Popen(self._argv([EPMD, "-port", str(port), "-address",
                                                 addresses], i),
                                     env=self._base_env(), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._children[child.pid] = child
        epmd.update(pid=child.pid, started_by_us=True)
        while not self._answers(port, i=i):
            if child.poll() is not None:
                raise ClusterError(f"epmd on port {port} exited with status {child.returncode}:\n"
                                   + _tail(log))
            if time.monotonic() > deadline:
                raise ClusterError(f"epmd (pid {child.pid}) did not listen on {port} in time")
            time.sleep(POLL_INTERVAL_S)

    def _spawn_nodes(self):
        self._spawned_at = time.monotonic()
        for i, n in enumerate(self._nodes):
            with open(n["stdout_file"], "w") as out:
                child = subprocess.Popen(self._argv([RABBITMQ_SERVER], i), env=self._node_env(n),
                                         cwd=n["dir"],
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self._children[child.pid] = child
            n["wrapper_pid"] = child.pid
            self._log(f"spawned {n['name']} (rabbitmq-server pid {child.pid})")

    def _read_beam_pid(self, n):
        try:
            with open(n["pid_file"]) as f:
                text = f.read().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def _wait_booted(self, deadline):
        pending = set(range(self.node_count))
        while pending:
            for i in sorted(pending):
                n = self._nodes[i]
                n["beam_pid"] = n["beam_pid"] or self._read_beam_pid(n)
                child = self._children[n["wrapper_pid"]]
                if child.poll() is not None:
                    raise self._node_failure(i, f"rabbitmq-server exited with status "
                                                f"{child.returncode} while booting")
                if n["beam_pid"] and all(self._answers(n[k], 0.5, i) for k in
                                         ("amqp_port", "stomp_port", "mgmt_port")):
                    self.node_boot_s[i] = round(time.monotonic() - self._spawned_at, 1)
                    self._log(f"{n['name']} answers after {self.node_boot_s[i]} s "
                              f"(beam pid {n['beam_pid']})")
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                i = min(pending)
                raise self._node_failure(i, "did not open its AMQP, STOMP and HTTP ports before "
                                            "the start timeout")
            if pending:
                time.sleep(POLL_INTERVAL_S)

    def _node_failure(self, i, what):
        n = self._nodes[i]
        first = _first_errors(n["stdout_file"])
        return ClusterError(
            f"RabbitMQ node {n['name']} {what} (amqp {n['amqp_port']}, stomp {n['stomp_port']}, "
            f"http {n['mgmt_port']}, dist {n['dist_port']}).\n"
            f"  last lines of {n['log_file']}:\n{_tail(n['log_file'])}\n"
            + (f"  first errors in {n['stdout_file']}:\n{first}\n" if first else "")
            + f"  last lines of {n['stdout_file']}:\n{_tail(n['stdout_file'], 15)}")

    def _await_startup_all(self, deadline):
        with concurrent.futures.ThreadPoolExecutor(self.node_count) as pool:
            futures = [pool.submit(self._await_startup, i, deadline)
                       for i in range(self.node_count)]
            for f in futures:
                f.result()

    def _await_startup(self, i, deadline):
        left_s = max(1, int(deadline - time.monotonic()))
        r = self.ctl(i, "await_startup", "--timeout", str(left_s), timeout_s=left_s + 10,
                     check=False)
        if r.returncode != 0:
            raise self._node_failure(i, f"failed `rabbitmqctl await_startup`: "
                                        f"{(r.stderr or r.stdout).strip()}")

    def _join(self, i, deadline):
        n, seed = self._nodes[i], self._nodes[0]["name"]
        t0 = time.monotonic()
        for args in (("stop_app",), ("join_cluster", seed), ("start_app",)):
            left_s = max(5.0, deadline - time.monotonic())
            r = self.ctl(i, *args, timeout_s=min(CTL_TIMEOUT_S, left_s), check=False)
            if r.returncode != 0:
                raise self._node_failure(i, f"failed `rabbitmqctl {' '.join(args)}` while "
                                            f"joining {seed}: {(r.stderr or r.stdout).strip()}")
        self._wait_ports(i, ("amqp_port", "stomp_port", "mgmt_port"), deadline,
                         f"after joining {seed}")
        self._log(f"{n['name']} joined {seed} in {time.monotonic() - t0:.1f} s")

    def _wait_ports(self, i, keys, deadline, when):
        n = self._nodes[i]
        while not all(self._answers(n[k], 0.5, i) for k in keys):
            if not _pid_alive(n["beam_pid"]):
                raise self._node_failure(i, f"died {when}")
            if time.monotonic() > deadline:
                raise self._node_failure(i, f"did not reopen {', '.join(keys)} {when}")
            time.sleep(POLL_INTERVAL_S)

    def _wait_running_nodes(self, expected, deadline):
        running = []
        while time.monotonic() < deadline:
            running = self.running_nodes()
            if sorted(running) == sorted(expected):
                return
            time.sleep(0.5)
        raise ClusterError(f"cluster_status on {self._nodes[0]['name']} reports running nodes "
                           f"{running}, expected {expected}")

    def _create_user(self, deadline):
        password = secrets.token_urlsafe(24)
        # The file holds exactly the password (no newline), readable by its owner only.
        path = self.passcode_file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password)
        guest = ("guest", "guest")
        self._api("PUT", f"/api/users/{LOGIN}", {"password": password, "tags": "administrator"},
                  auth=guest, ok=(201, 204), deadline=deadline)
        self._api("PUT", f"/api/permissions/%2F/{LOGIN}",
                  {"configure": ".*", "write": ".*", "read": ".*"},
                  auth=guest, ok=(201, 204), deadline=deadline)
        who = self._api("GET", "/api/whoami", deadline=deadline)
        if who.get("name") != LOGIN:
            raise ClusterError(f"/api/whoami as {LOGIN} answered {who}")

    # -- control -------------------------------------------------------------------------------

    def ctl(self, i, *args, timeout_s=CTL_TIMEOUT_S, check=True):
        """Runs `rabbitmqctl -n NODE args...` against node i; CompletedProcess (text)."""
        n = self._node(i)
        cmd = self._argv([RABBITMQCTL, "-n", n["name"], *args], i)
        try:
            r = subprocess.run(cmd, env=self._base_env(), capture_output=True, text=True,
                               timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise ClusterError(f"`rabbitmqctl -n {n['name']} {' '.join(args)}` did not finish in "
                               f"{timeout_s:.0f} s") from e
        if check and r.returncode != 0:
            raise ClusterError(f"`rabbitmqctl -n {n['name']} {' '.join(args)}` failed with "
                               f"status {r.returncode}: {(r.stderr or r.stdout).strip()}")
        return r

    def cluster_status(self, i=0):
        """`rabbitmqctl cluster_status --formatter json` as a dict, asked of node i."""
        r = self.ctl(i, "cluster_status", "--formatter", "json")
        try:
            return json.loads(r.stdout)
        except ValueError as e:
            raise ClusterError(f"cluster_status of {self._node(i)['name']} is not JSON: "
                               f"{r.stdout[:200]!r}") from e

    def running_nodes(self, i=0):
        return list(self.cluster_status(i).get("running_nodes", []))

    def stop_app(self, i, timeout_s=CTL_TIMEOUT_S):
        """Stops the RabbitMQ application on node i (Erlang stays up) and waits until its STOMP
        port refuses connections. Takes about 6 s: the management plugin waits 5 s."""
        n = self._node(i)
        deadline = time.monotonic() + timeout_s
        self.ctl(i, "stop_app", timeout_s=timeout_s)
        while self._answers(n["stomp_port"], 0.5, i):
            if time.monotonic() > deadline:
                raise ClusterError(f"STOMP port {n['stomp_port']} of {n['name']} still accepts "
                                   f"connections after stop_app")
            time.sleep(POLL_INTERVAL_S)

    def start_app(self, i, timeout_s=CTL_TIMEOUT_S):
        """Starts the RabbitMQ application on node i and waits until its STOMP, AMQP and HTTP
        ports answer again."""
        deadline = time.monotonic() + timeout_s
        self.ctl(i, "start_app", timeout_s=timeout_s)
        self._wait_ports(i, ("stomp_port", "amqp_port", "mgmt_port"), deadline, "after start_app")

    # -- management HTTP API -------------------------------------------------------------------

    def api(self, method, path, body=None, node_index=None, ok=(200, 201, 204)):
        """One management API call as the sluice user; parsed JSON (or None when empty).

        With node_index None the nodes are tried in order until one answers.
        """
        return self._api(method, path, body, node_index=node_index, ok=ok)

    def _api(self, method, path, body=None, node_index=None, auth=None, ok=(200, 201, 204),
             deadline=None):
        auth = auth or (LOGIN, self.passcode)
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        order = [node_index] if node_index is not None else list(range(self.node_count))
        failures = []
        while True:
            for i in order:
                url = self.mgmt_url(i) + path
                req = urllib.request.Request(url, data=data, method=method, headers=headers)
                try:
                    with self.in_netns(i), _HTTP.open(req, timeout=HTTP_TIMEOUT_S) as resp:
                        status, text = resp.status, resp.read().decode("utf-8", "replace")
                except urllib.error.HTTPError as e:
                    status, text = e.code, e.read().decode("utf-8", "replace")
                except (urllib.error.URLError, OSError) as e:
                    failures.append(f"{url}: {getattr(e, 'reason', e)}")
                    continue
                if status == 503 and deadline and time.monotonic() < deadline:
                    failures.append(f"{url}: 503 {text[:200]}")
                    continue  # a node still starting its HTTP API
                if status == 404 and 404 not in ok:
                    raise _NotFound(f"{method} {url} answered 404: {text[:300]}")
                if status not in ok:
                    raise ClusterError(f"{method} {url} answered {status}: {text[:500]}")
                return json.loads(text) if text.strip() else None
            if not deadline or time.monotonic() > deadline:
                raise ClusterError(f"{method} {path}: no management API answered: "
                                   + "; ".join(failures[-len(order):]))
            time.sleep(0.5)

    @staticmethod
    def _queue_path(vhost, name):
        q = urllib.parse.quote
        return f"/api/queues/{q(vhost, safe='')}/{q(name, safe='')}"

    def queue(self, vhost, name):
        """/api/queues/{vhost}/{name} as a dict, or None when the queue does not exist."""
        try:
            return self._api("GET", self._queue_path(vhost, name))
        except _NotFound:
            return None

    def queues(self, vhost=None):
        """The /api/queues list (of one vhost when given)."""
        path = "/api/queues" if vhost is None else \
            f"/api/queues/{urllib.parse.quote(vhost, safe='')}"
        return self._api("GET", path)

    @staticmethod
    def queue_home(info):
        """The node holding a queue per /api/queues: `leader` for quorum and stream queues
        (their `node` field appears only after the first statistics), `node` for classic."""
        return info.get("leader") or info.get("node")

    def declare_queue(self, vhost, name, node_index, type="classic", arguments=None,
                      timeout_s=15):
        """Declares a durable queue through node node_index and checks where it landed.

        The management API declares it over a connection on that node, so a classic queue lives
        there, and (found with 3.10.8) a quorum queue's first leader is that node too, with
        every cluster node as a member. A queue that already exists is not moved: then the
        check fails with a ClusterError that names both nodes. Returns the /api/queues record.
        """
        wanted = self._node(node_index)["name"]
        args = {"x-queue-type": type}
        args.update(arguments or {})
        path = self._queue_path(vhost, name)
        self._api("PUT", path, {"durable": True, "auto_delete": False, "arguments": args,
                                "node": wanted}, ok=(201, 204))
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.queue(vhost, name) or {}
            home = self.queue_home(info)
            if home:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"queue {name!r} in vhost {vhost!r}: /api/queues shows no "
                                   f"node or leader after {timeout_s} s: {info}")
            time.sleep(POLL_INTERVAL_S)
        if home != wanted:
            raise ClusterError(f"queue {name!r} in vhost {vhost!r} ({info.get('type')}) is on "
                               f"{home}, not on {wanted} as asked (did it exist already?)")
        return info

    def delete_queue(self, vhost, name, missing_ok=True):
        """Deletes a queue; True if it existed."""
        try:
            self._api("DELETE", self._queue_path(vhost, name), ok=(204,))
        except _NotFound:
            if not missing_ok:
                raise ClusterError(f"queue {name!r} in vhost {vhost!r} does not exist")
            return False
        return True

    # -- stop ----------------------------------------------------------------------------------

    def stop(self, quiet=False):
        """Stops every node (`rabbitmqctl stop`, then by PID if needed) and our epmd.

        Never raises for a node that is already gone; returns the problems met (empty when all
        went to plan). Idempotent.
        """
        with self._lock:
            if self._stopped or not self._nodes:
                self._stopped = True
                return []
            self._stopped = True
        t0 = time.monotonic()
        problems = []
        # Plain threads, not an executor: at interpreter exit (the atexit cleanup) executors
        # refuse new work, while threads still start.
        results = [[] for _ in range(self.node_count)]

        def stop_one(i):
            results[i] = self._stop_node(i)

        threads = [threading.Thread(target=stop_one, args=(i,)) for i in range(self.node_count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for result in results:
            problems += result
        for e in self._epmds:
            if e.get("started_by_us") and e.get("pid"):
                pid = e["pid"]
                p = _end_pid(pid, self.marker, f"epmd on port {e['port']}",
                             self._children.get(pid), term_wait_s=5)
                if p:
                    problems.append(p)
        # Helpers of a node (erl_child_setup, inet_gethost) exit just after its VM: grace first.
        grace_end = time.monotonic() + 3
        while _marked_pids(self.marker) and time.monotonic() < grace_end:
            time.sleep(POLL_INTERVAL_S)
        strays = _marked_pids(self.marker)
        if strays:
            problems.append(f"stray processes {strays} of {self.base_dir} had to be ended")
            problems += _end_marked(self.marker, strays, "stray processes")
        if not quiet or problems:
            self._log(f"cluster stopped in {time.monotonic() - t0:.1f} s"
                      + (": " + "; ".join(problems) if problems else ""))
        return problems

    def _stop_node(self, i):
        n = self._nodes[i]
        problems = []
        beam = n.get("beam_pid") or self._read_beam_pid(n)
        wrapper = n.get("wrapper_pid")
        if _pid_alive(beam):
            try:
                r = self.ctl(i, "stop", timeout_s=CTL_TIMEOUT_S, check=False)
                if r.returncode != 0:
                    problems.append(f"`rabbitmqctl stop` of {n['name']} failed: "
                                    f"{(r.stderr or r.stdout).strip()[:300]}")
            except ClusterError as e:
                problems.append(str(e))
            if not _wait_pid_gone(beam, STOP_WAIT_S):
                p = _end_pid(beam, self.marker, f"{n['name']} beam")
                problems.append(p or f"{n['name']} (beam pid {beam}) ignored rabbitmqctl stop "
                                     f"and was ended by signal")
        if wrapper:
            child = self._children.get(wrapper)
            if not _wait_pid_gone(wrapper, KILL_WAIT_S, child):
                p = _end_pid(wrapper, self.marker, f"{n['name']} rabbitmq-server", child)
                if p:
                    problems.append(p)
        return problems

    def leftover_pids(self):
        """Live processes that carry this cluster's marker (empty after a clean stop())."""
        return _marked_pids(self.marker)

    # -- helpers -------------------------------------------------------------------------------

    def _all_running(self):
        return all(_pid_alive(n.get("beam_pid")) for n in self._nodes)

    def _require_ports(self):
        if not self._nodes:
            raise ClusterError("the cluster has no nodes yet: call start() or attach() first")

    def _node(self, i):
        self._require_ports()
        if not 0 <= i < len(self._nodes):
            raise IndexError(f"node index {i} out of range 0..{len(self._nodes) - 1} "
                             f"(indices are 0-based)")
        return self._nodes[i]

    def _log(self, message):
        if self.verbose:
            _say(message)

    def netns_of(self, i=0):
        """The network namespace node i runs in (None: this process's)."""
        return self.node_netns[i] if self.node_netns else self.netns

    def _namespace_nodes(self):
        """One node index per namespace the nodes run in: [0], or every node with node_netns."""
        return list(range(self.node_count)) if self.node_netns else [0]

    def in_netns(self, i=0):
        """A context in which the calling thread's sockets reach node i's loopback ports."""
        ns = self.netns_of(i)
        if not ns:
            return contextlib.nullcontext()
        from netns_util import netns  # only needed (and importable) for namespaced clusters
        return netns(ns)

    def _answers(self, port, timeout_s=1.0, i=0):
        with self.in_netns(i):
            return _port_answers(port, timeout_s)

    def _argv(self, argv, i=0):
        ns = self.netns_of(i)
        return ["/usr/sbin/ip", "netns", "exec", ns, *argv] if ns else argv


class _NotFound(ClusterError):
    """The management API answered 404."""


# ---------------------------------------------------------------------------------------------
# One cluster per test run


_shared = None
_shared_lock = threading.Lock()


def shared_cluster(nodes=2, timeout_s=90, verbose=True):
    """The cluster for this test process.

    If $SLUICE_RABBIT_CLUSTER names a state file (from `rabbit_cluster.py start`), attaches to
    that running cluster: no start, no stop. Otherwise starts a private cluster in a temp dir
    and stops it (and removes the dir unless $SLUICE_RABBIT_KEEP_DIR is set) at exit, on
    SIGTERM and on SIGINT. A watchdog process ends the private cluster's processes should
    this process die without cleaning up (SIGKILL, a crash). Later calls return the same object.
    """
    global _shared
    with _shared_lock:
        if _shared is not None:
            if len(_shared.nodes) < nodes:
                raise ClusterError(f"the shared cluster has {len(_shared.nodes)} nodes, a test "
                                   f"asked for {nodes}")
            return _shared
        state_path = os.environ.get(SHARED_STATE_ENV)
        if state_path:
            cluster = RabbitCluster.attach(state_path, verbose=verbose)
            if len(cluster.nodes) < nodes:
                raise ClusterError(f"{SHARED_STATE_ENV}={state_path} describes "
                                   f"{len(cluster.nodes)} nodes, a test asked for {nodes}")
            try:
                cluster.api("GET", "/api/overview")
            except ClusterError as e:
                raise ClusterError(f"{SHARED_STATE_ENV}={state_path} describes a cluster that "
                                   f"does not answer (was it stopped?): {e}") from e
            if verbose:
                _say(f"attached to the cluster of {state_path}: {', '.join(cluster.node_names)}")
            _shared = cluster
            return cluster
        _shared = private_cluster(nodes=nodes, timeout_s=timeout_s, verbose=verbose)
        return _shared


def private_cluster(nodes=2, timeout_s=90, verbose=True, **options):
    """A cluster of this process alone, in a new temp dir, stopped (and the dir removed unless
    $SLUICE_RABBIT_KEEP_DIR is set) at exit, on SIGTERM and on SIGINT, and by a watchdog should
    this process die without cleaning up. options go to RabbitCluster (netns, stomp_addresses,
    ...). On a failed start the nodes are stopped and ClusterError raised."""
    base_dir = tempfile.mkdtemp(prefix="sluice-rabbit-")
    cluster = RabbitCluster(base_dir, nodes=nodes, verbose=verbose, **options)
    _start_watchdog(cluster.base_dir)
    _install_cleanup(cluster, base_dir)
    cluster.start(timeout_s=timeout_s)
    return cluster


_watchdogs = []  # Popen objects; their stdin pipes must stay open for our whole life


def _start_watchdog(base_dir):
    # The watchdog reads its stdin until EOF, which comes when we exit, however we exit; our
    # other children do not inherit the pipe (close_fds), so only our own exit closes it.
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "watchdog", "--dir",
                              base_dir], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             start_new_session=True)
    _watchdogs.append(child)


def _watchdog(base_dir):
    base_dir = os.path.realpath(base_dir)
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    pids = _marked_pids(base_dir)
    if pids:
        _say(f"watchdog: the test process died without stopping its cluster in {base_dir}; "
             f"ending {pids}")
        for problem in _end_marked(base_dir, pids, "watchdog"):
            _say(problem)
    if os.environ.get(KEEP_DIR_ENV) or not os.path.isdir(base_dir):
        return 0
    entries = os.listdir(base_dir)
    if not entries or OWNER_MARKER_FILE in entries:
        shutil.rmtree(base_dir, ignore_errors=True)
    return 0


def _install_cleanup(cluster, base_dir):
    done = threading.Event()

    def cleanup():
        if done.is_set():
            return
        done.set()
        cluster.stop()
        if os.environ.get(KEEP_DIR_ENV):
            _say(f"keeping {base_dir} ({KEEP_DIR_ENV} is set)")
        else:
            shutil.rmtree(base_dir, ignore_errors=True)

    run_at_exit(cleanup)


# ---------------------------------------------------------------------------------------------
# Command line


def _cli(argv):
    parser = argparse.ArgumentParser(
        prog="rabbit_cluster.py",
        description="Start or stop a local RabbitMQ cluster for Sluice's integration tests.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster, write its state file, leave it running")
    start.add_argument("--dir", required=True, help="directory for all node state (wiped)")
    start.add_argument("--state", required=True, help="state file to write (JSON)")
    start.add_argument("--nodes", type=int, default=2)
    start.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT)
    start.add_argument("--timeout", type=float, default=90, help="seconds (default 90)")
    stop = sub.add_parser("stop", help="stop the cluster a state file describes")
    stop.add_argument("--state", required=True)
    status = sub.add_parser("status", help="print the nodes and cluster_status of a state file")
    status.add_argument("--state", required=True)
    watchdog = sub.add_parser("watchdog", help="(internal) end a private cluster's processes "
                                               "once stdin reaches EOF")
    watchdog.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    if args.command == "watchdog":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return _watchdog(args.dir)

    try:
        if args.command == "start":
            cluster = RabbitCluster(args.dir, nodes=args.nodes, base_port=args.base_port)
            cluster.start(timeout_s=args.timeout)
            cluster.save(args.state)
            for line in cluster.describe():
                print(line)
            print(f"boot {cluster.boot_s:.1f} s; state file {args.state}; "
                  f"use {SHARED_STATE_ENV}={os.path.abspath(args.state)}")
            return 0
        cluster = RabbitCluster.attach(args.state)
        if args.command == "status":
            for line in cluster.describe():
                print(line)
            print("running nodes: " + ", ".join(cluster.running_nodes()))
            return 0
        problems = cluster.stop()
        left = cluster.leftover_pids()
        if left:
            print(f"processes of {cluster.base_dir} still alive: {left}", file=sys.stderr)
            return 1
        os.unlink(args.state)
        print(f"stopped {', '.join(cluster.node_names)}"
              + (f" ({len(problems)} problems, see above)" if problems else ""))
        return 0
    except ClusterError as e:
        print(f"rabbit_cluster.py {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
