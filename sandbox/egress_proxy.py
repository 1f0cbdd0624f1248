"""The coding agent's only way out: an HTTPS (CONNECT) proxy with a host allowlist.

The agent runs in its own network namespace (sandbox/agent_sandbox.py) where nothing but a
forwarder listens; the forwarder hands each connection to this proxy over a Unix socket. The
proxy tunnels a `CONNECT host:port` only when `host:port` is on the allowlist (the preset's API
host) *and* every address the name resolves to is a public one: loopback (a `whale serve`
there would take the agent's POSTs), private, link-local (cloud metadata), multicast and
reserved ranges are refused whatever the name, so a name pointed at 127.0.0.1 gains nothing.
The checked address is the one connected to (no second lookup an attacker could re-point).
Plain-HTTP proxying is refused: with keep-alive one connection could carry requests to several
hosts past a check made on the first, and the APIs agents use are HTTPS.

As Claude Code's sandbox-runtime and Codex's managed network proxy do, the allowlist is by
name; what goes through the tunnel is TLS the proxy does not read.
"""

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from pathlib import Path

from sandbox.egress_forwarder import pipe

HEAD_LIMIT = 16 << 10  # bytes of a CONNECT request's head
HEAD_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 30
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(Exception):
    """A connection the proxy will not make, with the reason it logs."""


def parse_allowed(entry: str) -> tuple[str, int]:
    """`host` (port 443), `host:port` or `[v6]:port`, lower case; a bad entry is a ValueError."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        port = port.removeprefix(":") or "443"
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, "443"
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ValueError(f"not a host or host:port: {entry!r}")
    return host, int(port)


def is_public(address: str) -> bool:
    """Whether an IP address is one the agent may reach: globally routable, not multicast, and
    not a private address in disguise (IPv4-mapped, 6to4, Teredo, NAT64)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if ip in NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and not is_public(str(embedded)):
            return False
    return ip.is_global and not ip.is_multicast


async def resolve_public(host: str, port: int) -> list[str]:
    """The addresses of `host`, refused if any of them is not public (a name that resolves to
    a public and a loopback address is refused: the client library could pick either)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    private = [a for a in addresses if not is_public(a)]
    if private or not addresses:
        raise Refused(f"{host} resolves to a non-public address ({', '.join(private)})")
    return addresses


class EgressProxy:
    """Listens on a Unix socket; `refused` lists every connection it turned down, in order."""

    def __init__(self, allow: Iterable[str]):
        self.allow = frozenset(parse_allowed(entry) for entry in allow)
        self.refused: list[str] = []
        self._server: asyncio.AbstractServer | None = None
        self._tunnels: set[asyncio.Task] = set()

    async def start(self, path: Path) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tunnels):
            task.cancel()
        await asyncio.gather(*self._tunnels, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tunnels.add(task)
        try:
            await self._tunnel(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tunnels.discard(task)
            writer.close()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            return await self._refuse(writer, 431, "request head too large", "?")
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = rest.rpartition(" ")[0] or rest
        if method != "CONNECT":
            return await self._refuse(
                writer, 405, "only CONNECT (HTTPS) goes through this proxy", f"{method} {target}"
            )
        try:
            host, port = parse_allowed(target)
        except ValueError:
            return await self._refuse(writer, 400, "not a host:port", f"CONNECT {target}")
        if (host, port) not in self.allow:
            allowed = ", ".join(f"{h}:{p}" for h, p in sorted(self.allow)) or "nothing"
            return await self._refuse(
                writer, 403, f"not an allowed host (allowed: {allowed})", f"CONNECT {target}"
            )
        try:
            addresses = await resolve_public(host, port)
            upstream_reader, upstream_writer = await self._connect(addresses, port)
        except Refused as exc:
            return await self._refuse(writer, 403, str(exc), f"CONNECT {target}")
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await writer.drain()
        try:
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()

    async def _connect(self, addresses: list[str], port: int):
        errors = []
        for address in addresses:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    return await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as exc:
                errors.append(f"{address}: {exc or 'timed out'}")
        raise Refused(f"could not connect: {'; '.join(errors)}")

    async def _refuse(
        self, writer: asyncio.StreamWriter, status: int, reason: str, what: str
    ) -> None:
        self.refused.append(f"{what}: {reason}")
        body = f"refused by the workbench's egress proxy: {reason}\n".encode()
        writer.write(
            f"HTTP/1.1 {status} Refused\r\ncontent-type: text/plain\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
