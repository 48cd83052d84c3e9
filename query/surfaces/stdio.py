"""MCP over stdio that answers what it was asked before it exits. The SDK's server stops reading at end of input
and cancels the calls still running, so `printf '…initialize…tools/call…' | blobdex mcp` printed only the first
reply; here the end of input waits until every request read has been answered (or DRAIN_SECONDS, the longest a
tool may run, have passed)."""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server
from mcp.types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

DRAIN_SECONDS = 65  # a tool's work is bounded at 60 s (query.surfaces.offload); its answer follows


async def serve(lowlevel) -> None:
    """Run `lowlevel` (the SDK's low-level server) over this process's stdin and stdout until input ends and
    every request has its answer."""
    waiting: set = set()  # ids of requests read and not yet answered
    answered = anyio.Event()
    async with stdio_server() as (read_stream, write_stream):
        inner_send, inner_receive = anyio.create_memory_object_stream(0)
        outer_send, outer_receive = anyio.create_memory_object_stream(0)

        async def read() -> None:
            nonlocal answered
            async with inner_send:
                async for message in read_stream:
                    if isinstance(getattr(message, "message", None), JSONRPCRequest):
                        waiting.add(message.message.id)
                    await inner_send.send(message)
                with anyio.move_on_after(DRAIN_SECONDS):
                    while waiting:
                        answered = anyio.Event()
                        await answered.wait()

        async def write() -> None:
            async with write_stream:  # closed once the server's side is: the SDK's writer then ends
                async for message in outer_receive:
                    if isinstance(message.message, JSONRPCResponse | JSONRPCError):
                        waiting.discard(message.message.id)
                        answered.set()
                    await write_stream.send(message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            async with outer_send:  # the server stops when reading ends (above); then writing ends too
                await lowlevel.run(inner_receive, outer_send, lowlevel.create_initialization_options())
