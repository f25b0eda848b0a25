#!/usr/bin/env python3
"""A Hermes extension that answers initialize, then asks the host for the
message again and again and never reads another byte: the host's replies pile
up in its stdin pipe. Standard library only."""

import json
import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer


def send(msg):
    body = json.dumps(msg).encode()
    stdout.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stdout.flush()


def read_message():
    length = None
    while True:
        line = stdin.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n") and length is not None:
            break
        key, _, value = line.decode().partition(":")
        if key.strip().lower() == "content-length":
            length = int(value)
    return json.loads(stdin.read(length))


while True:
    msg = read_message()
    if msg.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"name": "Deaf", "version": "1", "capabilities": {}}})
        break
for n in range(100000):
    send({"jsonrpc": "2.0", "id": n + 1, "method": "editor/getMessage", "params": {"format": "hl7"}})
sys.stdin.close()
import time

time.sleep(3600)
