"""Network namespaces for the DPDK engine's integration test (DESIGN.md section 7): the
client / gateway / nodes topology on veth pairs, a per-thread switch into a namespace, commands
run inside one, and packet loss induced with nftables.

Everything made here carries a short random suffix, is torn down by Topology.delete() (also at
exit and on SIGTERM/SIGINT), and every command is bounded in time.
"""

import contextlib
import ctypes
import os
import secrets
import subprocess
import threading
import time

from exit_cleanup import run_at_exit

IP = "/usr/sbin/ip"
ETHTOOL = "/usr/sbin/ethtool"
NFT = "/usr/sbin/nft"
CMD_TIMEOUT_S = 20
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    pass


def run(*cmd, check=True, timeout_s=CMD_TIMEOUT_S, ns=None):
    """Runs cmd (inside namespace ns when given); CompletedProcess with text output."""
    argv = [IP, "netns", "exec", ns, *cmd] if ns else list(cmd)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise NetnsError(f"`{' '.join(argv)}` did not finish in {timeout_s} s") from e
    if check and p.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` exited {p.returncode}: "
                         f"{(p.stderr or p.stdout).strip()}")
    return p


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise NetnsError(f"setns: {os.strerror(e)}")


@contextlib.contextmanager
def netns(name):
    """Moves the calling thread (only it) into namespace name for the block: sockets made, and
    threads and processes started, inside the block live there. None: stay where we are."""
    if not name:
        yield
        return
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(back)
    finally:
        os.close(back)


def suffix():
    return secrets.token_hex(2)


class Topology:
    """Client namespace C, gateway namespace G, and a namespace for each broker node, N and
    N2, on one link:

        C:  c0 10.77.1.2/24  <->  g0 (G, no address)
        N:  bridge nbr 10.77.2.10,12/24 over n0 and n1; n0 <-> g1 (G, no address)
        N2: m0 10.77.2.11/24 <-> n1 (N)
        N and N2: 10.77.3.0/24 via 10.77.2.1

    Node 1 (and the benchmark sink, .12) live in N, node 2 in N2: two hosts with their own
    MACs behind the gateway's port g1. Transmit checksum offload is off on every veth end and
    on the bridge (DPDK's af_packet PMD sends the kernel's partial checksums as they are), lo
    is up everywhere.
    """

    CLIENT_IP = "10.77.1.2"
    NODE_IPS = ("10.77.2.10", "10.77.2.11", "10.77.2.12")
    ENGINE_LOCAL_IP = "10.77.2.1"
    TAP_SUBNET = "10.77.3.0/24"

    def __init__(self, tag=None):
        self.tag = tag or suffix()
        self.c, self.g, self.n = f"slc-{self.tag}", f"slg-{self.tag}", f"sln-{self.tag}"
        self.n2 = f"slm-{self.tag}"
        self.created = []
        self._lock = threading.Lock()
        self._deleted = False

    @property
    def namespaces(self):
        return (self.c, self.g, self.n, self.n2)

    def create(self):
        _install_cleanup(self)
        for ns in self.namespaces:
            run(IP, "netns", "add", ns)
            self.created.append(ns)
            run(IP, "link", "set", "lo", "up", ns=ns)
        # Each veth pair is made in its first namespace, its peer moved straight to G.
        run(IP, "link", "add", "c0", "netns", self.c, "type", "veth", "peer", "name", "g0",
            "netns", self.g)
        run(IP, "link", "add", "n0", "netns", self.n, "type", "veth", "peer", "name", "g1",
            "netns", self.g)
        run(IP, "link", "add", "n1", "netns", self.n, "type", "veth", "peer", "name", "m0",
            "netns", self.n2)
        run(IP, "link", "add", "nbr", "type", "bridge", ns=self.n)
        for dev in ("n0", "n1"):
            run(IP, "link", "set", dev, "master", "nbr", ns=self.n)
        for ns, dev in ((self.c, "c0"), (self.g, "g0"), (self.n, "n0"), (self.g, "g1"),
                        (self.n, "n1"), (self.n2, "m0"), (self.n, "nbr")):
            run(ETHTOOL, "-K", dev, "tx", "off", ns=ns)
            run(IP, "link", "set", dev, "up", ns=ns)
        run(IP, "addr", "add", f"{self.CLIENT_IP}/24", "dev", "c0", ns=self.c)
        for a in (self.NODE_IPS[0], self.NODE_IPS[2]):
            run(IP, "addr", "add", f"{a}/24", "dev", "nbr", ns=self.n)
        run(IP, "addr", "add", f"{self.NODE_IPS[1]}/24", "dev", "m0", ns=self.n2)
        # Replies to the gateway's kernel (health probes, drainer: from its TAP subnet) go back
        # through the engine's local address.
        for ns in (self.n, self.n2):
            run(IP, "route", "add", self.TAP_SUBNET, "via", self.ENGINE_LOCAL_IP, ns=ns)
        # The addresses are usable at once (no duplicate address detection for IPv4), but
        # wait for the links to report carrier so the first packets are not lost.
        for ns, dev in ((self.c, "c0"), (self.n, "n0"), (self.n, "n1"), (self.n2, "m0"),
                        (self.n, "nbr")):
            self.wait_carrier(ns, dev)
        return self

    def wait_carrier(self, ns, dev, timeout_s=10):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            p = run("cat", f"/sys/class/net/{dev}/carrier", ns=ns, check=False)
            if p.stdout.strip() == "1":
                return
            time.sleep(0.1)
        raise NetnsError(f"{dev} in {ns} has no carrier after {timeout_s} s")

    def link_exists(self, ns, dev):
        return run(IP, "link", "show", dev, ns=ns, check=False).returncode == 0

    def delete(self):
        """Deletes the namespaces (and with them the veths and nft tables); returns problems."""
        with self._lock:
            if self._deleted:
                return []
            self._deleted = True
        problems = []
        for ns in reversed(self.created):
            p = run(IP, "netns", "del", ns, check=False)
            if p.returncode != 0:
                problems.append(f"ip netns del {ns}: {p.stderr.strip()}")
        return problems

    # -- packet loss -----------------------------------------------------------------------------

    def add_loss(self, ns, dev, percent, input_too=True):
        """Drops percent% of the packets ns sends (and receives, when input_too) at random, with
        an nftables table `inet sl`. Receive offload goes off on dev first, so that an input
        packet is one wire packet. (Output packets are TCP's GSO packets whatever the device
        says: Linux's TCP always builds them and segments after the netfilter hooks, so one
        output drop loses a burst of up to 64 KiB.) Returns the hooks it covers."""
        run(ETHTOOL, "-K", dev, "gro", "off", ns=ns)
        hooks = ["output"] + (["input"] if input_too else [])
        script = "add table inet sl\n"
        for hook in hooks:
            script += (f"add chain inet sl {hook} {{ type filter hook {hook} priority 0 ; }}\n"
                       f"add rule inet sl {hook} numgen random mod 100 < {percent} counter drop\n")
        p = subprocess.run([IP, "netns", "exec", ns, NFT, "-f", "-"], input=script, text=True,
                           capture_output=True, timeout=CMD_TIMEOUT_S)
        if p.returncode != 0:
            raise NetnsError(f"nft in {ns}: {p.stderr.strip()}\n{script}")
        return hooks

    def loss_counters(self, ns):
        """`nft list table inet sl` in ns: the drop rules with their counters."""
        p = run(NFT, "list", "table", "inet", "sl", ns=ns, check=False)
        return p.stdout

    def remove_loss(self, ns, dev):
        run(NFT, "delete", "table", "inet", "sl", ns=ns, check=False)
        run(ETHTOOL, "-K", dev, "gro", "on", ns=ns, check=False)


_topologies = []


def _install_cleanup(topology):
    """Deletes the namespaces at exit and on SIGTERM/SIGINT even if the test never reaches its
    finally (the finally is the normal path)."""
    if _topologies:
        _topologies.append(topology)
        return
    _topologies.append(topology)

    def cleanup():
        for t in _topologies:
            t.delete()

    run_at_exit(cleanup)
