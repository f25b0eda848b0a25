#!/usr/bin/env python3
"""An example Hermes extension: `names/uppercase` upper-cases the patient's
family and given names (PID.5.1, PID.5.2) after asking for confirmation.

It speaks JSON-RPC 2.0 over stdin/stdout with Content-Length framing, using
only Python's standard library, exactly as an extension for the Hermes
desktop app does; stderr is its log.
"""

import json
import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
# The toolbar button's icon: an "Aa" in SVG.
ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><text x="0" y="13" font-size="13" '
        'font-family="sans-serif" font-weight="bold">Aa</text></svg>')
next_id = 0


def log(text):
    print(f"[uppercase-names] {text}", file=sys.stderr, flush=True)


def read():
    length = None
    while True:
        line = stdin.readline()
        if not line:
            return None
        if line.strip() == b"":
            if length is not None:
                break
            continue
        key, _, value = line.decode("ascii").partition(":")
        if key.strip().lower() == "content-length":
            length = int(value)
    return json.loads(stdin.read(length).decode("utf-8"))


def write(message):
    body = json.dumps(message).encode("utf-8")
    stdout.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stdout.flush()


def call(method, params):
    """Sends a request and waits for its answer, handling what comes meanwhile."""
    global next_id
    next_id += 1
    my_id = next_id
    write({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params})
    while True:
        message = read()
        if message is None:
            sys.exit(0)
        if message.get("id") == my_id and "method" not in message:
            if "error" in message:
                raise RuntimeError(message["error"]["message"])
            return message["result"]
        handle(message)


def uppercase():
    tree = json.loads(call("editor/getMessage", {"format": "json"})["message"])
    pid = next((s for s in tree["segments"] if s["segment"] == "PID"), None)
    name = (pid or {}).get("fields", {}).get("5")
    if not isinstance(name, dict):
        call("ui/showMessage", {"message": "No patient name to change.", "kind": "warning"})
        return
    family, given = name.get("1", ""), name.get("2", "")
    if not call("ui/showConfirm", {"title": "Upper-case names", "message": f"Change {family}, {given}?", "buttons": "yesNo"})["confirmed"]:
        log("cancelled")
        return
    result = call("editor/patchMessage", {"patches": [
        {"path": "PID.5.1", "value": family.upper()},
        {"path": "PID.5.2", "value": given.upper()},
    ]})
    log(f"patched: {result}")


def handle(message):
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        log(f"initialising with Hermes {params.get('hermesVersion')}")
        write({"jsonrpc": "2.0", "id": message["id"], "result": {
            "name": "Upper-case names",
            "version": "1.0.0",
            "description": "Upper-cases the patient's names",
            "capabilities": {"commands": ["names/uppercase"], "schemaProvider": True, "events": [{"name": "message/opened"}]},
            "toolbarButtons": [{"id": "uppercase", "label": "NAMES", "icon": ICON, "command": "names/uppercase"}],
            # Names for the fields it knows, shown beside their paths in the editor page.
            "schema": {"segments": {"PID": {"fields": [
                {"field": 3, "name": "Patient Identifier List"},
                {"field": 5, "name": "Patient Name"},
                {"field": 5, "component": 1, "name": "Family Name"},
                {"field": 5, "component": 2, "name": "Given Name"},
                {"field": 7, "name": "Date of Birth"},
                {"field": 8, "name": "Administrative Sex"},
            ]}}},
        }})
    elif method == "shutdown":
        log(f"shutting down ({params.get('reason')})")
        write({"jsonrpc": "2.0", "id": message["id"], "result": {"success": True}})
        sys.exit(0)
    elif method == "command/execute" and params.get("command") == "names/uppercase":
        try:
            uppercase()
        except RuntimeError as e:
            log(f"[ERROR] {e}")
    elif method == "message/opened":
        log(f"opened {params.get('filePath', 'a new message')}")
    elif "id" in message:
        write({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}})


def main():
    while True:
        message = read()
        if message is None:
            return
        handle(message)


if __name__ == "__main__":
    main()
