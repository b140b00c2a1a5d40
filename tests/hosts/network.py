"""Hosts on one machine: Linux network namespaces joined by a bridge (root only).

Each host is a namespace with one interface on the bridge and an address of the test's own
subnet; the bridge's address is the test's (and its browser's) place on that network. A host
is lost whole by SIGKILLing every process in its namespace, and partitioned by the bridge:
its port stops forwarding, so its packets vanish both ways, with no reset, no refusal and no
error, until the port forwards again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass

# Names carry this prefix, so a run killed before its clean-up leaves nothing the next run
# cannot find and remove.
PREFIX = "cth"
BRIDGE = f"{PREFIX}br0"
# A private subnet that no interface of this machine uses (checked before it is taken).
SUBNET = os.environ.get("CONTINUITY_HOSTS_SUBNET", "10.231.197")
BRIDGE_ADDRESS = f"{SUBNET}.1"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass(frozen=True)
class Host:
    name: str
    address: str

    @property
    def namespace(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def cable(self) -> str:
        """The host's link on the bridge's side."""
        return f"{PREFIX}-{self.name}"

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run on this host: `ip netns exec` enters the namespace and execs it, so the
        process started is the program itself."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def pids(self) -> list[int]:
        listed = ip("netns", "pids", self.namespace, check=False).stdout.split()
        return [int(pid) for pid in listed]

    def lose(self) -> list[int]:
        """Every process on the host SIGKILLed, as a host is lost when its machine dies. Its kernel
        stays: peers get resets and refusals at once. A host that goes silent instead (power,
        network) is the partition's case (`Network.partition`)."""
        killed: list[int] = []
        deadline = time.monotonic() + 10
        while pids := self.pids():  # again: a pool or a postmaster may have forked meanwhile
            assert time.monotonic() < deadline, f"processes outlived SIGKILL on {self.name}"
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed += [pid for pid in pids if pid not in killed]
            time.sleep(0.05)
        return killed

    def mac(self) -> str:
        return json.loads(ip("-n", self.namespace, "-j", "link", "show", "eth0").stdout)[0][
            "address"
        ]


class Network:
    """The bridge and the hosts on it, made by `build` and removed by `remove`."""

    def __init__(self, hosts: dict[str, int]) -> None:
        self.hosts = {name: Host(name, f"{SUBNET}.{last}") for name, last in hosts.items()}

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def build(self) -> Network:
        remove_leftovers()
        if f" {SUBNET}." in ip("-4", "-o", "addr").stdout:
            raise RuntimeError(f"{SUBNET}.0/24 is in use here: set CONTINUITY_HOSTS_SUBNET")
        # Not through the host's firewall (br_netfilter, where Docker loaded it).
        ip("link", "add", BRIDGE, "type", "bridge", "nf_call_iptables", "0")
        ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        for host in self.hosts.values():
            ip("netns", "add", host.namespace)
            ip("link", "add", host.cable, "type", "veth", "peer", "name", "eth0", "netns",
               host.namespace)  # fmt: skip
            ip("link", "set", host.cable, "master", BRIDGE)
            ip("link", "set", host.cable, "up")
            ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            ip("-n", host.namespace, "link", "set", "eth0", "up")
            ip("-n", host.namespace, "link", "set", "lo", "up")
        return self

    def partition(self, name: str) -> None:
        """Cut `name` off: the cut is the last step, so whatever the caller reads afterwards
        is what the host had done before it. The hosts' address caches are pinned first, so no
        failed address lookup turns the silence into "no route to host" errors on either side."""
        cut = self[name]
        for other in self.hosts.values():
            if other is not cut:
                neighbour_pin(cut.namespace, other.address, other.mac())
                neighbour_pin(other.namespace, cut.address, cut.mac())
        subprocess.run(["bridge", "link", "set", "dev", cut.cable, "state", "0"], check=True)

    def heal(self, name: str) -> None:
        healed = self[name]
        subprocess.run(["bridge", "link", "set", "dev", healed.cable, "state", "3"], check=True)
        for other in self.hosts.values():
            if other is not healed:
                ip(
                    "-n",
                    healed.namespace,
                    "neigh",
                    "del",
                    other.address,
                    "dev",
                    "eth0",
                    check=False,
                )
                ip(
                    "-n",
                    other.namespace,
                    "neigh",
                    "del",
                    healed.address,
                    "dev",
                    "eth0",
                    check=False,
                )

    def remove(self) -> None:
        for host in self.hosts.values():
            host.lose()
        remove_leftovers()


def neighbour_pin(namespace: str, address: str, mac: str) -> None:
    ip("-n", namespace, "neigh", "replace", address, "lladdr", mac, "nud", "permanent", "dev",
       "eth0")  # fmt: skip


def remove_leftovers() -> None:
    """Whatever an earlier run left: its hosts' processes, namespaces and the bridge."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-"):
            for pid in ip("netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", name, check=False)
    # A namespace outlives its deletion until its killed processes are gone, and with it the
    # far end of its cable: deleting the near end removes both now.
    for link in json.loads(ip("-j", "link", "show").stdout):
        if link["ifname"].startswith(f"{PREFIX}-"):
            ip("link", "del", link["ifname"], check=False)
    ip("link", "del", BRIDGE, check=False)
