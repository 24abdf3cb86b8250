"""One free loopback port for a server a test starts.

Not the kernel's ``bind(0)`` pick: that comes from the ephemeral range (``ip_local_port_range``), the
same range every outgoing connection's source port comes from. A server started a moment later can then
find its port taken by a connection, as SeaweedFS did in CI ("s3 failed to listen on grpc port ...:
address already in use": weed's own clients had taken it). Ports below that range are handed out only
when asked for by number, and this process never hands out the same one twice."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    low = _ephemeral_range()[0]
    # Spread by pid too: pytest's processes and the servers they start draw from the same span.
    rng = random.Random(os.getpid() ^ random.getrandbits(32))
    for _ in range(200):
        port = rng.randrange(10000, low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port between 10000 and {low}")
