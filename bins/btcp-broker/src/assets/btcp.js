// btcp.js: a dependency-free BTCP browser client (ES module), served by
// btcp-broker at /btcp.js.
//
// A page (or an extension) registers tools with handlers; agents connected to
// the same broker session call them. The client connects over WebSocket (or
// SSE + POST with `transport: "sse"`), answers forwarded `tools/call`
// requests, reconnects with exponential backoff, and registers its tools again
// after every reconnect.
//
//   import { BtcpClient } from "/btcp.js";
//   const client = new BtcpClient({ sessionId: "demo" });
//   client.registerTool(
//     { name: "page_title", description: "The page title",
//       inputSchema: { type: "object", properties: {} } },
//     async () => document.title,
//   );
//   await client.connect();

const DEFAULTS = {
  url: null, // broker base URL; default: the origin this module came from
  sessionId: null, // default: one the broker generates (kept for reconnects)
  token: null, // BTCP_AUTH_TOKEN, sent as ?token= (browsers cannot set WS headers)
  transport: "websocket", // or "sse"
  reconnect: true,
  minDelay: 500, // ms, first reconnect delay
  maxDelay: 15000, // ms, backoff ceiling
  requestTimeout: 30000, // ms, for our own requests to the broker
};

/** Turns a handler's return value into a tool result `{content, isError}`. */
function toResult(value) {
  if (value && typeof value === "object" && Array.isArray(value.content)) {
    return { content: value.content, isError: Boolean(value.isError) };
  }
  const text = typeof value === "string" ? value : JSON.stringify(value ?? null);
  return { content: [{ type: "text", text }], isError: false };
}

export class BtcpClient extends EventTarget {
  constructor(options = {}) {
    super();
    this.options = { ...DEFAULTS, ...options };
    this.sessionId = this.options.sessionId || null;
    this.clientId = null;
    this.tools = new Map(); // name -> { definition, handler }
    this.pending = new Map(); // our request id -> { resolve, reject, timer }
    this.nextId = 1;
    this.attempt = 0;
    this.closed = false;
    this.connected = false;
    this.socket = null; // WebSocket, or EventSource for SSE
    this._welcomed = null;
  }

  /** Adds (or replaces) a tool; registered with the broker on (re)connect. */
  registerTool(definition, handler) {
    if (!definition || !definition.name) throw new Error("a tool needs a name");
    const def = { inputSchema: { type: "object", properties: {} }, ...definition };
    this.tools.set(def.name, { definition: def, handler });
    if (this.connected) this.registerTools().catch((e) => this._emit("error", e));
  }

  /** Connects; resolves once the broker welcomed us and our tools are registered. */
  connect() {
    this.closed = false;
    return new Promise((resolve, reject) => {
      this._welcomed = { resolve, reject };
      this._open();
    });
  }

  /** Disconnects for good (no reconnect). */
  close() {
    this.closed = true;
    this._teardown();
    this._failPending(new Error("client closed"));
  }

  /** Sends our tool list to the broker (replacing the session's list). */
  registerTools() {
    const tools = [...this.tools.values()].map((t) => t.definition);
    return this.request("tools/register", { tools });
  }

  /** Sends a JSON-RPC request to the broker and resolves with its result. */
  request(method, params) {
    const id = `btcp-${this.nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer within ${this.options.requestTimeout} ms`));
      }, this.options.requestTimeout);
      this.pending.set(id, { resolve, reject, timer });
      this._send({ jsonrpc: "2.0", id, method, params }).catch((e) => {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(e);
      });
    });
  }

  // ---- connection --------------------------------------------------------

  _base() {
    const base = this.options.url || new URL(".", import.meta.url).href;
    return base.replace(/\/$/, "");
  }

  _query(clientType) {
    const q = new URLSearchParams({ clientType, version: "1.0.0" });
    if (this.sessionId) q.set("sessionId", this.sessionId);
    if (this.options.token) q.set("token", this.options.token);
    return q.toString();
  }

  _open() {
    const base = this._base();
    if (this.options.transport === "sse") {
      const source = new EventSource(`${base}/events?${this._query("browser")}`);
      this.socket = source;
      const onData = (event) => this._onText(event.data);
      source.addEventListener("message", onData);
      source.addEventListener("request", onData);
      source.addEventListener("response", onData);
      // EventSource reconnects by itself, but with a new client id we would
      // not know; we take over reconnecting instead.
      source.onerror = () => this._onClose(0, "event stream error");
    } else {
      const wsBase = base.replace(/^http/, "ws");
      const ws = new WebSocket(`${wsBase}/ws?${this._query("browser")}`);
      this.socket = ws;
      ws.onmessage = (event) => this._onText(event.data);
      ws.onclose = (event) => this._onClose(event.code, event.reason);
      ws.onerror = () => {}; // onclose follows with the code
    }
  }

  _teardown() {
    const socket = this.socket;
    this.socket = null;
    this.connected = false;
    if (!socket) return;
    if (socket instanceof WebSocket) {
      socket.onclose = null;
      socket.onmessage = null;
      socket.close(1000, "client closed");
    } else {
      socket.close();
    }
  }

  _onClose(code, reason) {
    const wasConnected = this.connected;
    this._teardown();
    this._failPending(new Error(`disconnected (${code} ${reason || ""})`.trim()));
    if (wasConnected) this._emit("disconnect", { code, reason });
    if (code === 4001) {
      // Replaced by a newer browser for this session: do not fight it.
      this.closed = true;
      this._emit("replaced", { reason });
    }
    if (this.closed || !this.options.reconnect) {
      if (this._welcomed) {
        this._welcomed.reject(new Error(`connection closed (${code})`));
        this._welcomed = null;
      }
      return;
    }
    const delay = Math.min(this.options.maxDelay, this.options.minDelay * 2 ** this.attempt);
    this.attempt += 1;
    const jittered = delay / 2 + Math.random() * (delay / 2);
    this._emit("reconnecting", { delay: jittered, attempt: this.attempt });
    setTimeout(() => {
      if (!this.closed) this._open();
    }, jittered);
  }

  _failPending(error) {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(error);
      this.pending.delete(id);
    }
  }

  async _send(message) {
    const text = JSON.stringify(message);
    const socket = this.socket;
    if (!socket) throw new Error("not connected");
    if (socket instanceof WebSocket) {
      if (socket.readyState !== WebSocket.OPEN) throw new Error("not connected");
      socket.send(text);
      return;
    }
    const headers = { "Content-Type": "application/json", "X-Client-ID": this.clientId };
    if (this.options.token) headers.Authorization = `Bearer ${this.options.token}`;
    const response = await fetch(`${this._base()}/message`, { method: "POST", headers, body: text });
    if (response.status !== 202) throw new Error(`POST /message: HTTP ${response.status}`);
  }

  // ---- messages ----------------------------------------------------------

  _onText(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    for (const m of Array.isArray(message) ? message : [message]) this._onMessage(m);
  }

  _onMessage(m) {
    if (m.method && m.id !== undefined) return this._onRequest(m);
    if (m.method) return this._onNotification(m);
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.error) {
      const error = new Error(m.error.message);
      error.code = m.error.code;
      error.data = m.error.data;
      p.reject(error);
    } else {
      p.resolve(m.result);
    }
  }

  async _onNotification(m) {
    if (m.method === "welcome") {
      this.sessionId = m.params.sessionId;
      this.clientId = m.params.clientId;
      this.connected = true;
      this.attempt = 0;
      try {
        if (this.tools.size > 0) await this.registerTools();
        this._emit("connect", m.params);
        if (this._welcomed) {
          this._welcomed.resolve(m.params);
          this._welcomed = null;
        }
      } catch (e) {
        this._emit("error", e);
      }
      return;
    }
    if (m.method === "session/replaced") this._emit("replaced", m.params);
    this._emit("notification", m);
  }

  async _onRequest(m) {
    let reply;
    if (m.method === "tools/call") {
      const name = m.params && m.params.name;
      const tool = this.tools.get(name);
      this._emit("call", { name, arguments: m.params && m.params.arguments });
      if (!tool) {
        reply = { error: { code: -32004, message: `tool not found: ${name}` } };
      } else {
        try {
          reply = { result: toResult(await tool.handler(m.params.arguments || {})) };
        } catch (e) {
          const message = e && e.message ? e.message : String(e);
          reply = { result: { content: [{ type: "text", text: `Error: ${message}` }], isError: true } };
        }
      }
    } else if (m.method === "tools/list") {
      reply = { result: { tools: [...this.tools.values()].map((t) => t.definition) } };
    } else if (m.method === "ping") {
      reply = { result: { pong: true } };
    } else {
      reply = { error: { code: -32601, message: `method not found: ${m.method}` } };
    }
    this._send({ jsonrpc: "2.0", id: m.id, ...reply }).catch((e) => this._emit("error", e));
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}
