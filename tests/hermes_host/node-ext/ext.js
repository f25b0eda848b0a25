#!/usr/bin/env node
// A Hermes extension built on a third-party JSON-RPC library, vscode-jsonrpc,
// used as its README shows: a message connection over this process's stdin
// and stdout (Content-Length framing, which the library does itself),
// onRequest/onNotification for what the host sends, sendRequest for what we
// ask of it. Driven by the hermes-host integration tests; everything worth
// checking is logged on stderr, one `TAG <json>` line per step.
//
// Commands:
// - node/rewrite: editor/getMessage (hl7), editor/setMessage with the text
//   upper-cased, editor/patchMessage (non-ASCII values, a new segment),
//   editor/getMessage (json); logs each step, then `DONE`.
// - node/burst: 200 editor/getMessage requests at once; logs `BURST <ok>`.
// - node/unknown: a method the host does not have; logs `UNKNOWN <code>`.

'use strict';

const rpc = require('vscode-jsonrpc/node');

const connection = rpc.createMessageConnection(
    new rpc.StreamMessageReader(process.stdin),
    new rpc.StreamMessageWriter(process.stdout));

function log(tag, value) {
    process.stderr.write(value === undefined ? `${tag}\n` : `${tag} ${JSON.stringify(value)}\n`);
}

connection.onRequest('initialize', (params) => {
    log('INIT', params);
    return {
        name: 'Node Test Extension',
        version: '2.0.0',
        description: 'vscode-jsonrpc on stdio',
        capabilities: {
            commands: ['node/rewrite', 'node/burst', 'node/unknown'],
            events: [{ name: 'message/changed', options: { includeContent: true, format: 'json' } }],
        },
        toolbarButtons: [{ id: 'rewrite', label: 'Rewrite', icon: '<svg/>', command: 'node/rewrite' }],
    };
});

connection.onRequest('shutdown', (params) => {
    log('SHUTDOWN', params);
    return { success: true };
});

connection.onNotification('message/changed', (params) => log('CHANGED', params));

async function rewrite() {
    const got = await connection.sendRequest('editor/getMessage', { format: 'hl7' });
    log('GOT', { chars: [...got.message].length, bytes: Buffer.byteLength(got.message, 'utf8'), hasFile: got.hasFile });
    const set = await connection.sendRequest('editor/setMessage', { message: got.message.toUpperCase(), format: 'hl7' });
    log('SET', set);
    const patched = await connection.sendRequest('editor/patchMessage', {
        patches: [
            { path: 'PID.5.3', value: '李雷 🚑' },
            { path: 'NTE', create: true },
            { path: 'NTE.3', value: 'Grüße ✓' },
        ],
    });
    log('PATCHED', patched);
    const tree = await connection.sendRequest('editor/getMessage', { format: 'json' });
    const pid = JSON.parse(tree.message).segments.find((s) => s.segment === 'PID');
    log('TREE', pid.fields['5']);
}

async function burst() {
    const calls = [];
    for (let i = 0; i < 200; i++) {
        calls.push(connection.sendRequest('editor/getMessage', { format: 'hl7' }).then(() => true, () => false));
    }
    const results = await Promise.all(calls);
    log('BURST', results.filter(Boolean).length);
}

async function unknown() {
    try {
        await connection.sendRequest('editor/nope', {});
        log('UNKNOWN', 0);
    } catch (e) {
        log('UNKNOWN', e.code);
    }
}

const commands = { 'node/rewrite': rewrite, 'node/burst': burst, 'node/unknown': unknown };

connection.onNotification('command/execute', ({ command }) => {
    const run = commands[command];
    if (!run) {
        log('[WARN] unknown command', command);
        return;
    }
    run().then(() => log('DONE', command), (e) => log('[ERROR] FAILED', { command, code: e.code, message: e.message }));
});

// The host closes our stdin after answering shutdown: the connection ends, so do we.
connection.onClose(() => process.exit(0));
connection.listen();
log('[INFO] listening');
