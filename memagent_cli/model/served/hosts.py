"""Whether a host is this machine, as its name or address says (nothing is looked up): the one rule
a served engine's URL (`is_local`: where a server may be trusted to be ours) and the MCP server's
address and a browser's Origin (`is_loopback`) are judged by."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """`host` (a name, an address, or an address in brackets) is this machine over its loopback:
    localhost, 127.0.0.0/8, ::1, or an IPv4-mapped loopback address."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def is_this_host(host: str) -> bool:
    """is_loopback, and what a client reaches here besides: a subdomain of localhost (which resolves
    to it) and the unspecified address (0.0.0.0, ::)."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if is_loopback(host) or host.endswith(".localhost"):
        return True
    address = _address(host)
    return address is not None and address.is_unspecified


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
