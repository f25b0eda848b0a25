// JSON-RPC 2.0 over the page's one WebSocket (`/ws`): the host's control
// methods, in both directions: the page calls them (`call`), the host sends
// events as notifications (`on`) and the extensions' dialogs as requests
// (`serve`), which the page answers. Reconnects by itself; `onopen` runs
// after each (re)connection, to subscribe, attach and take a fresh snapshot.

export class Rpc {
  constructor(url) {
    this.url = url;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    this.handlers = new Map();
    this.onopen = () => {};
    this.onstatus = () => {};
    this.retry = 250;
  }

  connect() {
    const ws = new WebSocket(this.url);
    this.ws = ws;
    this.onstatus('connecting');
    ws.onopen = () => {
      this.retry = 250;
      this.onstatus('live');
      this.onopen();
    };
    ws.onmessage = (event) => this.receive(event.data);
    ws.onclose = () => {
      for (const { reject } of this.pending.values()) reject(new Error('the connection to the host closed'));
      this.pending.clear();
      this.onstatus('offline');
      setTimeout(() => this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 5000);
    };
  }

  /** Calls a control method; resolves with its result, rejects with its error. */
  call(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject(new Error('not connected to the host'));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  /** Listens to a notification (an event). */
  on(method, fn) {
    this.listeners.set(method, fn);
  }

  /** Answers a request from the host: `fn(params)` returns the result (or throws). */
  serve(method, fn) {
    this.handlers.set(method, fn);
  }

  receive(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    for (const one of Array.isArray(message) ? message : [message]) this.dispatch(one);
  }

  dispatch(message) {
    if (message.method === undefined) {
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      if (message.error) {
        const error = new Error(message.error.message);
        error.code = message.error.code;
        waiting.reject(error);
      } else waiting.resolve(message.result);
      return;
    }
    if (message.id === undefined) {
      this.listeners.get(message.method)?.(message.params);
      return;
    }
    this.answer(message);
  }

  async answer({ id, method, params }) {
    const handler = this.handlers.get(method);
    let reply;
    if (!handler) {
      reply = { jsonrpc: '2.0', id, error: { code: -32601, message: `the page does not handle ${method}` } };
    } else {
      try {
        reply = { jsonrpc: '2.0', id, result: await handler(params || {}) };
      } catch (error) {
        reply = { jsonrpc: '2.0', id, error: { code: error.code || -32012, message: String(error.message || error) } };
      }
    }
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(reply));
  }
}
