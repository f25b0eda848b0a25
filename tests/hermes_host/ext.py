#!/usr/bin/env python3
"""A Hermes test extension speaking raw Content-Length over stdio (standard
library only, like Hermes' own test extensions), driven by the integration
tests.

EXT_MODE picks a behaviour: normal (default), silent (never answers
initialize), crash (exits right after initialize), crash_on_command (exits
when it gets a command), ignore_shutdown (answers shutdown but never exits),
early (sends editor/getMessage at once and answers initialize 0.5 s later;
logs `EARLY {"afterInitialize": <was initialize answered when the response
came>, "response": ...}`).
EXT_COMMANDS: comma-separated commands to declare (default: test/ping).
EXT_EVENTS: comma-separated events to subscribe to (`message/changed+json`
asks for content in that format).
EXT_READ=chars reads and writes like Hermes' own test extensions: text-mode
stdin where `read(length)` counts characters, not bytes, and ASCII-only JSON
out (`json.dumps` escapes non-ASCII). Correct only while what arrives is ASCII.

Commands it understands (the test drives it through `command/execute`):
- test/ping: logs "pong"
- test/call: reads {"method", "params"} from the file EXT_CALL_FILE, sends
  that request to the host and logs `RESULT <json>` with the whole response;
  EXT_CALL_COPIES (1) copies of it at once, each logged as it is answered.
- test/burst: sends EXT_BURST (200) editor/getMessage requests at once, logs
  `BURST <ok count>` when all are answered.
- test/garbage: writes malformed frames, then a valid request.
- test/stderr: logs lines at every level.
- test/button (its toolbar button's command): asks ui/showConfirm and logs
  `CONFIRMED <the whole response>`.
- test/edit (declared only through EXT_COMMANDS): reads the message, patches
  PID.5.1 and logs `EDITED <n> ok` (or `EDITED <n> <what came back>`), n
  counting edits since the start.
- test/stderr logs the lines of EXT_STDERR (a JSON array) instead, if set.
- test/stop-reading: never reads its input again (and keeps running).
- test/flood: sends EXT_FLOOD (200) editor/getMessage requests at once, then
  never reads its input again: their replies pile up in the host.
- test/close-output: closes its standard output and keeps running.
Everything it receives is logged as `GOT <json>` on stderr.
"""

import json
import os
import sys
import threading

out_lock = threading.Lock()
stdin = sys.stdin.buffer
stdout = sys.stdout.buffer
MODE = os.environ.get("EXT_MODE", "normal")
CHARS = os.environ.get("EXT_READ") == "chars"
if CHARS:
    import io
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n")
pending = {}
pending_lock = threading.Lock()
initialize_answered = threading.Event()
next_id = [1000]
edits = [0]


def log(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def write_raw(data):
    with out_lock:
        stdout.write(data)
        stdout.flush()


def send(msg):
    body = json.dumps(msg, ensure_ascii=CHARS).encode("utf-8")
    write_raw(b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def read_message():
    length = None
    while True:
        line = stdin.readline()
        if not line:
            return None
        if isinstance(line, bytes):
            line = line.decode("ascii", "replace")
        if line in ("\r\n", "\n"):
            if length is not None:
                break
            continue
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-length":
            length = int(value.strip())
    body = stdin.read(length)  # in CHARS mode: characters
    return json.loads(body if CHARS else body.decode("utf-8"))


def request(method, params):
    """Sends a request from a worker thread and waits for its response."""
    event = threading.Event()
    with pending_lock:
        next_id[0] += 1
        rid = next_id[0]
        pending[rid] = [event, None]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    event.wait()
    with pending_lock:
        return pending.pop(rid)[1]


def initialize_result():
    commands = os.environ.get("EXT_COMMANDS", "test/ping,test/call,test/burst,test/garbage,test/stderr,test/exit").split(",")
    events = []
    for name in filter(None, os.environ.get("EXT_EVENTS", "").split(",")):
        name, _, fmt = name.partition("+")
        events.append({"name": name, "options": {"includeContent": bool(fmt), "format": fmt or "hl7"}})
    return {
        "name": "Test Extension",
        "version": "1.2.3",
        "description": "Drives the hermes-host tests",
        "capabilities": {"commands": commands, "schemaProvider": True, "events": events},
        "toolbarButtons": [
            {"id": "b1", "label": "Button", "icon": "<svg/>", "command": "test/button"},
            {"id": "b2", "label": "Ping", "command": "test/ping"},
        ],
        "schema": json.loads(os.environ.get("EXT_SCHEMA", "{}")),
    }


def summary(response):
    """A response fit for one log line: a long message is cut, its size kept."""
    result = response.get("result") if isinstance(response, dict) else None
    if isinstance(result, dict) and isinstance(result.get("message"), str) and len(result["message"]) > 2000:
        result = dict(result)
        result["messageBytes"] = len(result["message"].encode("utf-8"))
        result["message"] = result["message"][:100]
        response = dict(response, result=result)
    return json.dumps(response, ensure_ascii=False)


def run_command(command):
    if command == "test/ping":
        log("pong")
    elif command == "test/call":
        with open(os.environ["EXT_CALL_FILE"], encoding="utf-8") as f:
            call = json.load(f)

        def one():
            log("RESULT " + summary(request(call["method"], call.get("params", {}))))

        copies = int(os.environ.get("EXT_CALL_COPIES", "1"))
        for _ in range(copies - 1):
            threading.Thread(target=one, daemon=True).start()
        one()
    elif command == "test/burst":
        n = int(os.environ.get("EXT_BURST", "200"))
        results = [None] * n

        def one(i):
            results[i] = request("editor/getMessage", {"format": "hl7"})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log("BURST %d" % sum(1 for r in results if r and "result" in r))
    elif command == "test/garbage":
        write_raw(b"this is not a header\r\n\r\n{garbage}")
        write_raw(b"Content-Length: 9\r\n\r\n{not json")
        log("RESULT " + json.dumps(request("editor/getMessage", {"format": "hl7"})))
    elif command == "test/stderr":
        lines = json.loads(os.environ.get("EXT_STDERR", "null")) or [
            "[ERROR] an error", "WARN: a warning", "[info] some info", "debug: details"]
        for line in lines:
            log(line)
    elif command == "test/edit":
        with pending_lock:
            edits[0] += 1
            n = edits[0]
        got = request("editor/getMessage", {"format": "hl7"})
        patched = request("editor/patchMessage", {"patches": [{"path": "PID.5.1", "value": "EDIT%d" % n}]})
        fine = "result" in got and patched.get("result", {}).get("success") is True
        log("EDITED %d %s" % (n, "ok" if fine else json.dumps([got, patched])[:500]))
    elif command == "test/button":
        answer = request("ui/showConfirm", {"title": "Test confirm", "message": "Proceed with the test?", "buttons": "yesNo"})
        log("CONFIRMED " + json.dumps(answer))
    elif command == "test/exit":
        os._exit(3)
    else:
        log("unknown command " + command)


def stop_reading(command):
    """Runs on the reading thread, which never reads again; the process lives on."""
    import time
    if command == "test/flood":
        for n in range(int(os.environ.get("EXT_FLOOD", "200"))):
            body = json.dumps({"jsonrpc": "2.0", "id": 10 ** 6 + n, "method": "editor/getMessage", "params": {"format": "hl7"}})
            write_raw(b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body.encode())
    if command == "test/close-output":
        os.close(1)
    log("STOPPED READING " + command)
    while True:
        time.sleep(3600)


def main():
    log("[INFO] starting, HERMES_API_VERSION=%s HERMES_DATA_DIR=%s HERMES_VERSION=%s" % (
        os.environ.get("HERMES_API_VERSION"), os.environ.get("HERMES_DATA_DIR"), os.environ.get("HERMES_VERSION")))
    while True:
        msg = read_message()
        if msg is None:
            log("stdin closed")
            return
        log("GOT " + json.dumps(msg, ensure_ascii=False)[:2000])
        if "method" not in msg:
            with pending_lock:
                slot = pending.get(msg.get("id"))
                if slot:
                    slot[1] = msg
                    slot[0].set()
            continue
        method = msg["method"]
        if method == "initialize":
            if MODE == "silent":
                continue
            if MODE == "early":
                def early():
                    response = request("editor/getMessage", {"format": "hl7"})
                    log("EARLY " + json.dumps({"afterInitialize": initialize_answered.is_set(), "response": response}))

                def answer_later(rid):
                    import time
                    time.sleep(0.5)
                    initialize_answered.set()
                    send({"jsonrpc": "2.0", "id": rid, "result": initialize_result()})

                threading.Thread(target=early, daemon=True).start()
                threading.Thread(target=answer_later, args=(msg["id"],), daemon=True).start()
                continue
            if MODE == "exit_during_init":
                import time
                time.sleep(0.3)
                os._exit(4)
            send({"jsonrpc": "2.0", "id": msg["id"], "result": initialize_result()})
            if MODE == "crash":
                os._exit(7)
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"success": True}})
            log("shutdown reason=%s" % msg.get("params", {}).get("reason"))
            if MODE != "ignore_shutdown":
                return
        elif method == "command/execute":
            command = msg["params"]["command"]
            if MODE == "crash_on_command":
                os._exit(5)
            if command in ("test/stop-reading", "test/flood", "test/close-output"):
                stop_reading(command)
            threading.Thread(target=run_command, args=(command,), daemon=True).start()
        elif "id" in msg:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
