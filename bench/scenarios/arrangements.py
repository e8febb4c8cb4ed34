"""What sluice-load is pointed at: the benchmark sink directly, or through a proxy in front of it.

Every process is started here by Popen, remembered, and ended by its PID in `Processes.stop_all`
(the harness calls it in a `finally`). Ports are picked free on loopback at run time.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    """Popen preexec_fn: the child gets SIGTERM if the harness dies, even by SIGKILL (the
    setting survives taskset's exec). The harness is single-threaded, so preexec_fn is safe."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's choice; it is used within a second)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout_s, what):
    """Wait until 127.0.0.1:port accepts a connection; fail naming `what` if it never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening "
                               f"on 127.0.0.1:{port} (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} is not listening on 127.0.0.1:{port} after {timeout_s} s")


def cpu_seconds(pid):
    """User + system CPU seconds a live process has used so far (from /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_delay_seconds(pid):
    """Seconds a live process has spent runnable but waiting for a CPU (/proc/PID/schedstat):
    on a shared machine, what tells a starved process from an idle one."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def pinned(cmd, cpus):
    """`cmd` under `taskset -c cpus`, or unchanged when cpus is None (no pinning)."""
    return cmd if cpus is None else ["taskset", "-c", cpus] + cmd


class Processes:
    """Every long-lived process the harness starts, so that all are ended by PID at the end."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.procs = []  # (name, Popen, log file)

    def start(self, name, cmd):
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self.procs.append((name, proc, log))
        return proc

    def stop(self, proc, grace_s=3.0):
        for i, (name, p, log) in enumerate(self.procs):
            if p is proc:
                del self.procs[i]
                _end(p, grace_s)
                log.close()
                return

    def stop_all(self):
        while self.procs:
            self.stop(self.procs[-1][1])


def _end(proc, grace_s):
    """SIGTERM to this PID, then SIGKILL to it if it is still there after grace_s."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class Sink:
    """`sluice-load serve` on a free loopback port; every arrangement ends at it."""

    def __init__(self, procs, sluice_load, cpus, lifetime_s, connections_max=4096):
        self.port = free_port()
        self.cmd = pinned([sluice_load, "serve", "--listen", f"127.0.0.1:{self.port}",
                           "--connections-max", str(connections_max),
                           # a backstop: the sink ends itself even if the harness is SIGKILLed
                           "--duration", str(int(lifetime_s))], cpus)
        self.proc = procs.start(f"sink-{self.port}", self.cmd)
        wait_listening(self.port, self.proc, 10, "sluice-load serve (the sink)")


# Worker threads of every proxy: HAProxy's nbthread and sluiced's [gateway] workers are the same
# count, so that the comparison is per thread.
THREADS = 1


class Direct:
    """sluice-load straight to the sink: the reference every other arrangement is divided by."""

    name = "direct"

    def __init__(self, procs, sink, cpus, log_dir, options=None):
        self.port = sink.port
        self.commands = []
        self.pids = []


class HAProxy:
    """HAProxy 2.6 in TCP mode, one thread, from a generated config: the comparison peer."""

    name = "haproxy"
    binary = "/usr/sbin/haproxy"

    def __init__(self, procs, sink, cpus, log_dir, options=None):
        self.port = free_port()
        config = os.path.join(log_dir, f"haproxy-{self.port}.cfg")
        options = options or {}
        maxconn = int(options["sessions_max"]) + 64 if "sessions_max" in options else 8192
        with open(config, "w") as f:
            f.write(HAPROXY_CONFIG.format(port=self.port, sink_port=sink.port,
                                          threads=THREADS, maxconn=maxconn))
        cmd = pinned([self.binary, "-db", "-f", config], cpus)
        self.commands = [cmd]
        self.proc = procs.start(f"haproxy-{self.port}", cmd)
        wait_listening(self.port, self.proc, 10, "haproxy")
        self.pids = [self.proc.pid]


# One thread (nbthread THREADS) so that HAProxy gets the same single core as the sink; buffers and
# timeouts are HAProxy's defaults apart from generous client/server timeouts (no idle cut during
# a run). No logging: it would cost HAProxy time that the sink does not spend.
HAPROXY_CONFIG = """\
# generated by bench/scenario.py for one scenario; removed with the run's directory
global
    nbthread {threads}
    maxconn {maxconn}

defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s

frontend stomp
    bind 127.0.0.1:{port}
    default_backend sink

backend sink
    server sink 127.0.0.1:{sink_port}
"""


class Sluiced:
    """sluiced (the io_uring engine) from a generated config whose one node is the sink; with
    options {"owner_down": True} the node is a closed port, so every session is a spill session.
    The binaries are set once by the harness (`Sluiced.binary`, `Sluiced.sluicectl`)."""

    name = "sluiced"
    binary = None
    sluicectl = None
    # [stomp] login_cache_ms: sluiced's default (a login the sink accepted answers the same
    # login's next CONNECTs for a minute: the warm cache of a returning client).
    login_cache_ms = 60_000

    def __init__(self, procs, sink, cpus, log_dir, options=None):
        options = options or {}
        if not self.binary or not self.sluicectl:
            raise RuntimeError("sluiced arrangement: no sluiced or sluicectl binary (--sluiced, "
                               "--sluicectl)")
        self.port = free_port()
        self.owner_down = bool(options.get("owner_down"))
        owner_port = free_port() if self.owner_down else sink.port  # free: nothing listens
        self.dir = os.path.join(log_dir, f"sluiced-{self.port}")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "admin.sock")
        # Default 10,000 (sluiced's own default); the idle-session measurement asks for exactly
        # what it holds, since sluiced sizes its session tables from it at start.
        sessions = (int(options["sessions_max"]) + 64 if "sessions_max" in options else 10_000)
        config = os.path.join(self.dir, "sluice.toml")
        with open(config, "w") as f:
            f.write(SLUICED_CONFIG.format(workers=THREADS,
                                          state_dir=os.path.join(self.dir, "state"),
                                          port=self.port, socket=self.socket,
                                          owner_port=owner_port, sessions=sessions,
                                          login_cache_ms=self.login_cache_ms))
        self.config = config
        cmd = pinned([self.binary, "--config", config], cpus)
        self.commands = [cmd]
        self.proc = procs.start(f"sluiced-{self.port}", cmd)
        wait_listening(self.port, self.proc, 15, "sluiced")
        self._wait_ready(15)
        self.pids = [self.proc.pid]

    def cleanup(self):
        """Removes the state directory once sluiced has stopped: the spill scenario leaves
        gigabytes of spill segments there, and a run of many scenarios would fill the disk.
        The config and the log stay with the run's other files."""
        shutil.rmtree(os.path.join(self.dir, "state"), ignore_errors=True)

    def ctl(self, *argv, timeout_s=5):
        """`sluicectl --socket S --json ARGV...`: its parsed JSON, or None if it failed."""
        try:
            out = subprocess.run([self.sluicectl, "--socket", self.socket, "--json", *argv],
                                 capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None

    def _wait_ready(self, timeout_s):
        """Until the admin API answers and the node's health is what the scenario needs (up
        for spliced sessions, down for spill sessions): a run never measures the transition."""
        deadline = time.monotonic() + timeout_s
        status = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluiced exited with code {self.proc.returncode} while "
                                   f"starting (see its log; config {self.config})")
            status = self.ctl("status")
            if status is not None and status.get("nodes_up") == (0 if self.owner_down else 1):
                return
            time.sleep(0.1)
        raise RuntimeError(f"sluiced did not become ready in {timeout_s} s (`sluicectl --socket "
                           f"{self.socket} status` answered {status}; config {self.config})")


# Sessions limits follow the sessions_max option (the idle-session measurement); the per-source
# limit too, since every client is 127.0.0.1. Health probes every 500 ms, so that a
# down owner is seen as down within 1.5 s of the start.
SLUICED_CONFIG = """\
# generated by bench/scenario.py for one scenario; removed with the run's directory
[gateway]
id = "bench"
workers = {workers}
state_dir = "{state_dir}"

[listen]
address = "127.0.0.1:{port}"

[admin]
socket = "{socket}"
log_level = "info"

[stomp]
login_check = "eager"
login_cache_ms = {login_cache_ms}

[limits]
sessions_max = {sessions}
sessions_per_source_max = {sessions}
prelude_sessions_max = {sessions}

[health]
probe = "tcp"
interval_ms = 500
timeout_ms = 250

[[nodes]]
name = "sink"
address = "127.0.0.1:{owner_port}"

[spill]
allow_anonymous = true
"""


# The arrangements, in the order they run within each repetition (A B C A B C ...). The first
# one is the reference of the ratios. A class starts its process(es) through Processes.start,
# waits for its port, and sets .port, .commands and .pids.
class Relay:
    """bench/splice_relay: blocking splice(2) through a pipe, a thread per direction, nothing
    else. Not a gateway: the floor of any proxy that splices, placed like the others, so that
    a run shows what the machine leaves for one (bench/SCENARIOS.md). The binary is set by the
    harness (`Relay.binary`)."""

    name = "relay"
    binary = None

    def __init__(self, procs, sink, cpus, log_dir, options=None):
        if not self.binary:
            raise RuntimeError("relay arrangement: no splice_relay binary (--splice-relay)")
        self.port = free_port()
        cmd = pinned([self.binary, "--listen", f"127.0.0.1:{self.port}",
                      "--upstream", f"127.0.0.1:{sink.port}"], cpus)
        self.commands = [cmd]
        self.proc = procs.start(f"relay-{self.port}", cmd)
        wait_listening(self.port, self.proc, 10, "splice_relay")
        self.pids = [self.proc.pid]


class SluicedCold(Sluiced):
    """sluiced with the login cache off: every CONNECT is checked by the sink (the node) before
    the gateway answers, the cold cache of clients never seen."""

    name = "sluiced-cold"
    login_cache_ms = 0


ARRANGEMENTS = {
    "direct": Direct,
    "haproxy": HAProxy,
    "sluiced": Sluiced,
    "sluiced-cold": SluicedCold,
    "relay": Relay,
}
