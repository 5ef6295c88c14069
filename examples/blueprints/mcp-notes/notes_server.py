#!/usr/bin/env python3
"""A notes MCP server over stdio (newline-delimited JSON-RPC 2.0): the
example server of examples/blueprints/mcp-notes. Tools: `add_note` and
`list_notes`; notes are kept in the file NOTES_FILE (default notes.json),
under TOLLGATE_PACK_WORK_DIR when it runs from a pack (the folder tollgate
gives a pack's programs to write in, apart from the verified files). What
it logs on stderr becomes the calls' `tool_delta` events."""

import json
import os
import sys

NOTES = os.path.join(os.environ.get("TOLLGATE_PACK_WORK_DIR", "."),
                     os.environ.get("NOTES_FILE", "notes.json"))
TOOLS = [
    {"name": "add_note", "description": "Saves a note",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "list_notes", "description": "Lists the saved notes",
     "inputSchema": {"type": "object", "properties": {}}},
]


def load():
    try:
        with open(NOTES) as file:
            return json.load(file)
    except FileNotFoundError:
        return []


def answer(ident, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    if not line.strip():
        continue
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue
    if method == "initialize":
        answer(ident, {"protocolVersion": message["params"]["protocolVersion"],
                       "capabilities": {"tools": {}},
                       "serverInfo": {"name": "notes", "version": "1.0"}})
    elif method == "tools/list":
        answer(ident, {"tools": TOOLS})
    elif method == "tools/call":
        name, args = message["params"]["name"], message["params"].get("arguments") or {}
        notes = load()
        if name == "add_note":
            print(f"saving note {len(notes) + 1}", file=sys.stderr, flush=True)
            notes.append(args["text"])
            with open(NOTES, "w") as file:
                json.dump(notes, file)
            result = {"saved": len(notes)}
        else:
            print(f"listing {len(notes)} notes", file=sys.stderr, flush=True)
            result = {"notes": notes}
        answer(ident, {"content": [{"type": "text", "text": json.dumps(result)}],
                       "structuredContent": result})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "error": {
            "code": -32601, "message": f"no method {method}"}}) + "\n")
        sys.stdout.flush()
