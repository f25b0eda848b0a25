"""An MCP client driven line by line, for the integration tests.

It uses the official MCP Python SDK (`pip install mcp`) exactly as its docs
show: `Client(StdioServerParameters(...))` for a stdio server, `Client(url)`
for streamable HTTP. The Rust test writes one JSON command per line on stdin
and reads one JSON answer per line on stdout:

    {"op": "open", "server": {"command": ..., "args": [...], "env": {...}} | {"url": ...},
     "mode": "auto" | "legacy", "listen": {"tools": true, "resources": ["uri", ...]}}
    {"op": "list_tools"}
    {"op": "call_tool", "name": ..., "arguments": {...}, "timeout": seconds?}
    {"op": "list_resources"}
    {"op": "read_resource", "uri": ...}
    {"op": "subscribe", "uri": ...}              (initialize-era sessions)
    {"op": "next_change", "timeout": seconds}    -> {"change": "tools" | "resource", "uri"?} or {"change": null}
    {"op": "close"}                               -> {"warnings": [what the SDK logged at WARNING or above]}

Answers: {"ok": <result as JSON>} or {"error": "<type>: <message>", "code": <int>?}.
Change notifications (tools/list_changed, resources/updated) are collected
from the session (initialize era) or from a `subscriptions/listen` stream
(2026-07-28), whichever the negotiated version uses.
"""

import asyncio
import json
import logging
import sys
import warnings
from contextlib import AsyncExitStack

import mcp_types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError


class Collected(logging.Handler):
    """What the SDK logs at WARNING or above (still printed on stderr too), so
    that a test can see, for instance, that closing a session went cleanly."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())
        print(record.getMessage(), file=sys.stderr, flush=True)


class Driver:
    def __init__(self):
        self.stack = AsyncExitStack()
        self.client = None
        self.changes = asyncio.Queue()
        self.logged = Collected()
        logging.getLogger("mcp").addHandler(self.logged)

    async def on_message(self, message):
        # Initialize-era notifications arrive here (and exceptions, which we ignore).
        # In the 2026-07-28 era the SDK tees listen-stream events here as well;
        # those are counted once, from the stream (`pump`).
        if self.client is not None and self.client.protocol_version >= "2026-07-28":
            return
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method == "notifications/tools/list_changed":
            await self.changes.put({"change": "tools"})
        elif method == "notifications/resources/updated":
            await self.changes.put({"change": "resource", "uri": str(root.params.uri)})

    async def open(self, cmd):
        server = cmd["server"]
        if "url" in server:
            target = server["url"]
        else:
            target = StdioServerParameters(command=server["command"], args=server.get("args", []),
                                           env=server.get("env"), cwd=server.get("cwd"))
        self.client = await self.stack.enter_async_context(
            Client(target, mode=cmd.get("mode", "auto"), message_handler=self.on_message,
                   client_info=mcp_types.Implementation(name=cmd.get("client_name", "mcp-test-driver"), version="1.0")))
        listen = cmd.get("listen")
        if listen and self.client.protocol_version >= "2026-07-28":
            sub = await self.stack.enter_async_context(self.client.listen(
                tools_list_changed=bool(listen.get("tools")),
                resource_subscriptions=listen.get("resources", [])))
            asyncio.get_running_loop().create_task(self.pump(sub))
        return {"protocolVersion": self.client.protocol_version,
                "serverInfo": self.client.server_info.model_dump(exclude_none=True) if self.client.server_info else None,
                "capabilities": self.client.server_capabilities.model_dump(exclude_none=True, by_alias=True)}

    async def pump(self, sub):
        try:
            async for event in sub:
                name = type(event).__name__
                if name == "ToolsListChanged":
                    await self.changes.put({"change": "tools"})
                elif name == "ResourceUpdated":
                    await self.changes.put({"change": "resource", "uri": str(event.uri)})
        except Exception as e:  # the stream ended; the test sees no more changes
            await self.changes.put({"change": None, "ended": repr(e)})

    async def run(self, cmd):
        op = cmd["op"]
        c = self.client
        if op == "open":
            return await self.open(cmd)
        if op == "list_tools":
            return (await c.list_tools()).model_dump(exclude_none=True, by_alias=True)
        if op == "call_tool":
            r = await c.call_tool(cmd["name"], cmd.get("arguments", {}), read_timeout_seconds=cmd.get("timeout"))
            return r.model_dump(exclude_none=True, by_alias=True)
        if op == "list_resources":
            return (await c.list_resources()).model_dump(exclude_none=True, by_alias=True)
        if op == "read_resource":
            return (await c.read_resource(cmd["uri"])).model_dump(exclude_none=True, by_alias=True)
        if op == "subscribe":
            # For initialize-era sessions, where resources/subscribe is the
            # way; the SDK warns that the 2026-07-28 era removed it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                return (await c.subscribe_resource(cmd["uri"])).model_dump(exclude_none=True, by_alias=True)
        if op == "next_change":
            try:
                return await asyncio.wait_for(self.changes.get(), cmd.get("timeout", 5))
            except asyncio.TimeoutError:
                return {"change": None}
        if op == "close":
            await self.stack.aclose()
            return {"warnings": self.logged.messages}
        raise ValueError(f"unknown op {op}")


async def main():
    driver = Driver()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        cmd = json.loads(line)
        try:
            answer = {"ok": await driver.run(cmd)}
        except MCPError as e:
            answer = {"error": f"MCPError: {e}", "code": e.error.code}
        except BaseExceptionGroup as group:
            answer = {"error": "; ".join(f"{type(e).__name__}: {e}" for e in group.exceptions)}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer, default=str), flush=True)
        if cmd["op"] == "close":
            break
    await driver.stack.aclose()


if __name__ == "__main__":
    asyncio.run(main())
