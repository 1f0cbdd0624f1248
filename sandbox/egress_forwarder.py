"""Runs inside the coding agent's sandbox, as the parent of the agent: the sandbox has a network
namespace of its own (only loopback, nothing routed out), and this program listens on its
loopback at the port HTTPS_PROXY names, handing every connection to the workbench's egress proxy
through the Unix socket bound into the sandbox (sandbox/egress_proxy.py). It then runs the
agent and exits with its status. Standard library only: it runs under whatever Python the
sandbox shows, outside the workbench's environment.

argv: SOCKET PORT -- COMMAND...
"""

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of file, then pass the end on (half-close)."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass


async def main(socket_path: str, port: int, command: list[str]) -> int:
    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    try:
        agent = await asyncio.create_subprocess_exec(*command)
    except OSError as exc:
        print(f"the agent command cannot run in its sandbox: {command[0]}: {exc}", flush=True)
        return 127
    async with server:
        return await agent.wait()


if __name__ == "__main__":
    socket_path, port, separator, *command = sys.argv[1:]
    assert separator == "--" and command, __doc__
    sys.exit(asyncio.run(main(socket_path, int(port), command)))
