// The page's wiring: one WebSocket to the host's control methods
// (`rpc.js`), subscribed to every event and attached as the UI; every part
// of the page drawn from the host's state and redrawn when an event says
// it changed. A `message_changed` event fetches the message once (a burst
// of them while a fetch is in flight costs one more, not one each), and a
// page that fell behind (`missed`) takes a fresh snapshot, not a backlog.

import { $, toast } from './dom.js';
import { Rpc } from './rpc.js';
import { parse, fieldNames } from './hl7.js';
import { MessageTree } from './tree.js';
import { TextViews } from './raw.js';
import { Files } from './files.js';
import { Extensions } from './extensions.js';
import { Dialogs } from './dialogs.js';
import { Windows } from './windows.js';

const state = { message: null, hasFile: false, filePath: null, dirty: false };
let names = new Map();
const rpc = new Rpc(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`);

async function edit(patches) {
  try {
    const outcome = await rpc.call('message/patch', { patches });
    if (!outcome.success) toast(outcome.errors.map((e) => `${e.path}: ${e.message}`).join('; '), 'error');
  } catch (error) {
    toast(error.message, 'error');
  }
  snapshot();
}

const tree = new MessageTree($('#tree'), {
  patch: (path, value) => edit([{ path, value }]),
  addSegment: (name) => edit([{ path: name, create: true }]),
  removeSegment: (path) => edit([{ path, remove: true }]),
  rerender: () => tree.show(parse(state.message ?? ''), names),
});
const views = new TextViews($('#text'), {
  set: async (message) => {
    try {
      await rpc.call('message/set', { message, format: 'hl7' });
    } catch (error) {
      toast(error.message, 'error');
      throw error;
    }
  },
  get: async (format) => (await rpc.call('message/get', { format })).message,
});
const files = new Files($('#files'), rpc, state);
const extensions = new Extensions(rpc, { list: $('#extensions'), toolbar: $('#toolbar'), log: $('#log'), logTitle: $('#log-title') });
const dialogs = new Dialogs(rpc, $('#elsewhere'));
const windows = new Windows(rpc, $('#windows'));

let fetching = false;
let again = false;
let renders = 0;

/** Fetches the message and redraws; one fetch at a time, then one more if asked meanwhile. */
async function snapshot() {
  if (fetching) {
    again = true;
    return;
  }
  fetching = true;
  try {
    do {
      again = false;
      try {
        const got = await rpc.call('message/get', { format: 'hl7' });
        Object.assign(state, { message: got.message, hasFile: got.hasFile, filePath: got.filePath || null, dirty: got.dirty });
      } catch (error) {
        if (error.code !== -32003) throw error;
        Object.assign(state, { message: null, hasFile: false, filePath: null, dirty: false });
      }
      render();
    } while (again);
  } catch (error) {
    toast(error.message, 'error');
  } finally {
    fetching = false;
  }
}

function render() {
  const started = performance.now();
  files.show();
  const t1 = performance.now();
  const parsed = parse(state.message ?? '');
  const t15 = performance.now();
  tree.show(parsed, names);
  const t2 = performance.now();
  views.show(state.message);
  const t3 = performance.now();
  document.body.dataset.renders = String(++renders);
  document.body.dataset.drawMs = `parse ${Math.round(t15 - t1)} tree ${Math.round(t2 - t15)} raw ${Math.round(t3 - t2)} total ${Math.round(t3 - started)}`;
}

async function loadSchema() {
  try {
    names = fieldNames(await rpc.call('schema/get'));
    tree.show(parse(state.message ?? ''), names);
  } catch { /* no schema: paths alone */ }
}

rpc.on('message_changed', () => snapshot());
rpc.on('extension_state', (listing) => {
  extensions.update(listing);
  if (listing.state === 'running') loadSchema();
});
rpc.on('log', (event) => extensions.log(event));
rpc.on('missed', () => {
  snapshot();
  extensions.refresh();
});
rpc.onstatus = (status) => {
  const el = $('#status');
  el.textContent = status;
  el.className = `status ${status}`;
  document.body.dataset.status = status;
  if (status === 'offline') {
    dialogs.reset();
    windows.reset();
    explainRefusal();
  }
};

/** A live channel refused (not just closed): the host restarted with a new token. Said at most every 30 s. */
let explained = 0;
async function explainRefusal() {
  if (Date.now() - explained < 30000) return;
  try {
    const probe = await fetch('/assets/style.css', { cache: 'no-store' });
    if (probe.status !== 401) return;
    explained = Date.now();
    toast('The host no longer takes this page\'s token (it restarted?): open the URL `hermes-host ctl web` prints.', 'error');
  } catch { /* the host is down: the page reconnects when it is back */ }
}
rpc.onopen = async () => {
  try {
    await rpc.call('subscribe', { events: ['*'] });
    await rpc.call('ui/attach', { takeover: true });
    await Promise.all([snapshot(), extensions.refresh(), loadSchema()]);
    document.body.dataset.ready = 'yes';
  } catch (error) {
    toast(error.message, 'error');
  }
};

document.addEventListener('keydown', (e) => {
  if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's') {
    e.preventDefault();
    files.save();
  }
});

rpc.connect();
