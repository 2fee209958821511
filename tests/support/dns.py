"""A real DNS server for the tests, and processes that resolve through it alone.

The server is dnsmasq (Debian's ``dnsmasq-base``) on a loopback address of
its own, port 53, answering for the ``.test`` domain from a hosts file it
reads again on SIGHUP — so a test changes what a name resolves to while the
process under test keeps resolving it. Nothing else is forwarded anywhere.

glibc's resolver takes its server from ``/etc/resolv.conf`` and cannot be
told a port; ``resolving_through`` runs a command in a mount namespace of its
own with a resolv.conf naming this server bind-mounted over the real one, so
that command alone sees it (this needs root, which the test suite runs as).
"""

import random
import signal
import socket
import struct
import time
from pathlib import Path

from deploy.local import ManagedProcess

DNSMASQ = "/usr/sbin/dnsmasq"
DOMAIN = "test"


def free_loopback_address() -> str:
    """A 127.53.x.y address on which nothing listens on port 53 yet (away
    from 127.0.0.53, where a local resolver may live)."""
    for _ in range(100):
        address = f"127.53.{random.randint(0, 255)}.{random.randint(1, 254)}"
        try:
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                with socket.socket(socket.AF_INET, kind) as sock:
                    sock.bind((address, 53))
        except OSError:
            continue
        return address
    raise RuntimeError("no free loopback address for a DNS server")


def query_a(
    server: str, name: str, timeout: float = 1.0, source: str = "127.0.0.1"
) -> list[str] | None:
    """``name``'s IPv4 addresses as ``server`` answers them (sorted; empty
    for no such name or no address), or None if it did not answer. Asked
    from the address ``source``."""
    ident = random.randint(0, 0xFFFF)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    packet = struct.pack("!6H", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!2H", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.sendto(packet, (server, 53))
        try:
            reply = sock.recv(4096)
        except OSError:  # no answer in time (or nothing listening yet)
            return None
    got, flags, _, answers, _, _ = struct.unpack("!6H", reply[:12])
    if got != ident:
        return None
    if flags & 0xF:  # NXDOMAIN and other refusals: no address
        return []
    offset = 12 + len(question) + 4
    addresses = []
    for _ in range(answers):
        offset = _skip_name(reply, offset)
        kind, _, _, length = struct.unpack("!2HIH", reply[offset : offset + 10])
        offset += 10
        if kind == 1 and length == 4:
            addresses.append(socket.inet_ntoa(reply[offset : offset + 4]))
        offset += length
    return sorted(addresses)


def _skip_name(message: bytes, offset: int) -> int:
    while message[offset]:
        if message[offset] & 0xC0 == 0xC0:  # a pointer ends the name
            return offset + 2
        offset += message[offset] + 1
    return offset + 1


class DnsServer:
    """dnsmasq answering for names under ``.test`` from a hosts file."""

    def __init__(self, log_dir: Path) -> None:
        self.address = free_loopback_address()
        self._hosts = log_dir / "dns-hosts"
        self._hosts.write_text("")
        self.resolv_conf = log_dir / "resolv.conf"
        # One query per lookup, never retried short of a stall far longer
        # than any here: ``lookups`` counts lookups by their queries.
        self.resolv_conf.write_text(f"nameserver {self.address}\noptions timeout:30 attempts:1\n")
        argv = [
            DNSMASQ,
            "--keep-in-foreground",
            "--log-facility=-",
            "--log-queries",
            "--conf-file=/dev/null",
            "--pid-file=",
            "--user=root",
            f"--listen-address={self.address}",
            "--bind-interfaces",
            "--port=53",
            "--no-resolv",
            "--no-hosts",
            f"--addn-hosts={self._hosts}",
            # Answer for the domain here only: no A record means "none", and
            # AAAA queries get an empty answer rather than a refusal.
            f"--local=/{DOMAIN}/",
        ]
        self.process = ManagedProcess("dnsmasq", argv, {}, log_dir)
        deadline = time.monotonic() + 30
        while self._ask(f"ready.{DOMAIN}", timeout=0.5) is None:
            if self.process.proc.poll() is not None or time.monotonic() > deadline:
                self.process.stop()
                raise RuntimeError(f"dnsmasq did not answer:\n{self.process.log_tail()}")

    def answer(self, name: str, addresses: list[str], timeout: float = 30.0) -> None:
        """From now on ``name`` resolves to ``addresses``: the hosts file is
        replaced whole, dnsmasq told to read it again, and its answer checked."""
        staged = self._hosts.with_suffix(".new")
        staged.write_text("".join(f"{address} {name}\n" for address in addresses))
        staged.replace(self._hosts)
        self.process.signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while self._ask(name) != sorted(addresses):
            if time.monotonic() > deadline:
                raise TimeoutError(f"dnsmasq does not answer {addresses} for {name}")
            time.sleep(0.05)

    def lookups(self, name: str) -> int:
        """How many times others have asked for ``name``'s IPv4 addresses
        (dnsmasq logs every query; this helper's own come from the server's
        address, and are not counted)."""
        asked, own = f"query[A] {name} from ", f" from {self.address}"
        lines = self.process.log_text().splitlines()
        return sum(1 for line in lines if asked in line and not line.endswith(own))

    def _ask(self, name: str, timeout: float = 1.0) -> list[str] | None:
        return query_a(self.address, name, timeout, source=self.address)

    def stop(self) -> None:
        self.process.stop()


def resolving_through(server: DnsServer, argv: list[str]) -> list[str]:
    """``argv`` run so that its name lookups go to ``server`` and nowhere else:
    a private mount namespace whose /etc/resolv.conf is the server's."""
    script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    return ["unshare", "--mount", "--", "sh", "-c", script, "sh", str(server.resolv_conf), *argv]
