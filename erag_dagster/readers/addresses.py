"""Which reader server addresses need an explicit opt-in: link-local and cloud metadata.

A reader ``base_url`` pointing at a cloud metadata service (``http://169.254.169.254/…``,
``metadata.google.internal``) would send prompts — and, with ``api_key_env``, the key — to the
machine's instance-credential endpoint; an address of that kind is far more often a mistake or
an injected config than a real inference server. So :func:`link_local_reason` names such an
address, and :class:`~erag_dagster.readers.spec.ReaderSpec` refuses it unless the reader entry
says ``allow_link_local: true``.

Covered, without any DNS lookup (offline and deterministic): IPv4 ``169.254.0.0/16`` (written in
any form the C library accepts: ``169.254.169.254``, ``2852039166``, ``0xa9.0xfe.0xa9.0xfe``),
IPv6 ``fe80::/10`` and IPv4-mapped forms of the above, AWS's IPv6 metadata address
``fd00:ec2::254``, Alibaba's ``100.100.100.200`` and the metadata host names of
:data:`METADATA_HOSTS`. A host name that merely *resolves* to such an address is not seen.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["METADATA_HOSTS", "link_local_reason"]

METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data",
     "instance-data.ec2.internal", "metadata.azure.com", "metadata.platformequinix.com"}
)  # fmt: skip
"""Host names of cloud instance-metadata services (lower case, no trailing dot)."""
_METADATA_IPS = (ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200"))


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address (IPv6 literal, dotted quad, or a legacy IPv4 form such as
    ``2852039166`` that ``inet_aton`` — and so the HTTP client — accepts), else None."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # fe80::1%eth0: zone dropped
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def link_local_reason(host: str | None) -> str | None:
    """Why ``host`` (a URL's host name, no brackets) needs ``allow_link_local: true``, or None."""
    if not host:
        return None
    name = host.strip().lower().rstrip(".")
    if name in METADATA_HOSTS:
        return f"{name} is a cloud metadata service"
    address = _address(name)
    if address is None:
        return None
    if address in _METADATA_IPS:
        return f"{address} is a cloud metadata address"
    if address.is_link_local:
        return f"{address} is a link-local address (cloud metadata services live there)"
    return None
