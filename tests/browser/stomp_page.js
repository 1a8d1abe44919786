// One STOMP-over-WebSocket round trip with @stomp/stompjs (the UMD bundle's global `StompJs`):
// connect, subscribe with ack:client, publish COUNT messages, receive + ack each in order,
// DISCONNECT with receipt, then reconnect and check that nothing comes back (the acks took).
// The JSON result goes to window.__result, the #result element and the title (ok|fail).
// Query parameters (all optional except port or url):
//   url | host=127.0.0.1 port path=/ws   ws endpoint      versions=1.2    STOMP versions (comma list)
//   dest=/queue/sansmq-browser-<run>      destination      count=1000      messages
//   login passcode vhost (-> host header) settle_ms=300    wait for stray redeliveries
//   timeout_ms=60000                      whole-run limit  debug=1         keep stompjs debug lines
//   disconnect_receipt=1                  require a RECEIPT for DISCONNECT (0: RabbitMQ 3.10 Web-STOMP
//                                         closes the socket without one; the verify phase still proves the acks)
//   heartbeat=0,0                         our CONNECT heart-beat (out,in ms); with idle_ms the page idles after
//   idle_ms=0                             SUBSCRIBE and requires the broker's heart-beats to keep it alive
//   unacked_tail=0                        leave the last N messages unacked (a self-test: they must come back)
//   binary=1                              send binary WebSocket frames instead of text ones
//   clean_close=1                         require wasClean (a completed closing handshake); 0 accepts a close
//                                         code 1000/1005 even when the server drops TCP first (RabbitMQ does)
'use strict';

const P = new URLSearchParams(location.search);
const runId = Math.random().toString(36).slice(2, 10);
const cfg = {
  url: P.get('url') || `ws://${P.get('host') || '127.0.0.1'}:${P.get('port')}${P.get('path') || '/ws'}`,
  versions: (P.get('versions') || '1.2').split(','),
  dest: P.get('dest') || `/queue/sansmq-browser-${runId}`,
  count: parseInt(P.get('count') || '1000', 10),
  settleMs: parseInt(P.get('settle_ms') || '300', 10),
  timeoutMs: parseInt(P.get('timeout_ms') || '60000', 10),
  debug: P.get('debug') === '1',
  needDisconnectReceipt: P.get('disconnect_receipt') !== '0',
  needCleanClose: P.get('clean_close') !== '0',
  heartbeat: (P.get('heartbeat') || '0,0').split(',').map(v => parseInt(v, 10) || 0),
  idleMs: parseInt(P.get('idle_ms') || '0', 10),
  binary: P.get('binary') === '1',
  unackedTail: parseInt(P.get('unacked_tail') || '0', 10),
};
const connectHeaders = {};
for (const [param, header] of [['login', 'login'], ['passcode', 'passcode'], ['vhost', 'host']]) {
  if (P.has(param)) connectHeaders[header] = P.get(param);
}

const result = {
  ok: false, phase: 'init', run_id: runId, url: cfg.url, destination: cfg.dest, count: cfg.count,
  subprotocol: null, version: null, server: null, heart_beat: null, received: 0, acked: 0,
  mismatches: 0, heartbeats_in_idle: null, redelivered: null, disconnect_receipt: false, close: null,
  timing: {}, errors: [], debug: [],
};
const t0 = performance.now();
const lap = (name, since) => { result.timing[name] = Math.round(performance.now() - since); };
let finished = false;

function fail(msg) {
  if (result.errors.length < 20) result.errors.push(`[${result.phase}] ${msg}`);
}

function finish() {
  if (finished) return;
  finished = true;
  lap('total_ms', t0);
  const expectedProto = cfg.versions.length === 1 ? `v${cfg.versions[0].replace('.', '')}.stomp` : null;
  if (expectedProto && result.subprotocol !== expectedProto) {
    fail(`negotiated subprotocol ${JSON.stringify(result.subprotocol)}, wanted ${expectedProto}`);
  }
  // A STOMP 1.0 server need not send the version header at all.
  const versionOk = result.version === cfg.versions[0] || (cfg.versions[0] === '1.0' && result.version === null);
  if (cfg.versions.length === 1 && !versionOk) {
    fail(`CONNECTED version ${JSON.stringify(result.version)}, wanted ${cfg.versions[0]}`);
  }
  if (cfg.heartbeat[0] && cfg.heartbeat[1] && cfg.idleMs) {
    const [sx, sy] = (result.heart_beat || '0,0').split(',').map(v => parseInt(v, 10) || 0);
    if (!sx || !sy) fail(`broker declined heart-beats: heart-beat:${result.heart_beat}`);
    if (!(result.heartbeats_in_idle >= 1)) fail(`no heart-beat from the broker while idle (${result.heartbeats_in_idle})`);
  }
  if (result.received !== cfg.count) fail(`received ${result.received} of ${cfg.count}`);
  if (result.redelivered !== cfg.unackedTail) fail(`redelivered after reconnect: ${result.redelivered}`);
  if (cfg.needDisconnectReceipt && !result.disconnect_receipt) fail('no RECEIPT for DISCONNECT');
  const close = result.close;
  if (!close || ![1000, 1005].includes(close.code) || (cfg.needCleanClose && !close.wasClean)) {
    fail(`unclean close ${JSON.stringify(close)}`);
  }
  result.ok = result.errors.length === 0 && result.mismatches === 0;
  result.phase = 'done';
  if (!cfg.debug) delete result.debug;
  window.__result = result;
  document.getElementById('result').textContent = JSON.stringify(result, null, 1);
  document.title = `sansmq stompjs: ${result.ok ? 'ok' : 'fail'}`;
}

// The body varies in length and carries non-ASCII text, so UTF-8 and framing both get checked.
const bodyFor = i => `${runId}:${i}:héllo ✓ ${'x'.repeat(i % 97)}`;

function connect(label) {
  return new Promise((resolve, reject) => {
    const stats = { pongs: 0 };  // outside the client: debug may run while it is being built
    const client = new StompJs.Client({
      brokerURL: cfg.url,
      stompVersions: new StompJs.Versions(cfg.versions),
      connectHeaders,
      reconnectDelay: 0,          // one attempt: a failure must surface, not loop
      heartbeatOutgoing: cfg.heartbeat[0],
      heartbeatIncoming: cfg.heartbeat[1],
      forceBinaryWSFrames: cfg.binary,
      debug: line => {
        if (line === '<<< PONG') stats.pongs++;  // an EOL from the broker: its heart-beat
        if (cfg.debug && result.debug.length < 200) result.debug.push(`${label}: ${line}`);
      },
    });
    client.stats = stats;
    client.onHeartbeatLost = () => fail(`${label} lost the broker's heart-beat`);
    let connected = false;
    client.closing = false;
    client.onConnect = frame => { connected = true; resolve({ client, frame }); };
    client.onStompError = frame => {
      fail(`${label} ERROR frame: ${frame.headers.message || ''} ${frame.body || ''}`.trim());
      if (!connected) reject(new Error('STOMP ERROR before CONNECTED'));
      else finish();  // the broker ends the session after ERROR: report now, not at the timeout
    };
    client.onWebSocketError = () => fail(`${label} WebSocket error event`);
    client.onWebSocketClose = evt => {
      if (label === 'main') result.close = { code: evt.code, reason: evt.reason, wasClean: evt.wasClean };
      if (!connected) reject(new Error(`${label} WebSocket closed before CONNECTED (code ${evt.code})`));
      else if (!client.closing) {
        fail(`${label} WebSocket closed by the server (code ${evt.code} ${evt.reason})`);
        finish();
      }
    };
    client.onDisconnect = () => { if (label === 'main') result.disconnect_receipt = true; };
    client.activate();
  });
}

function subscribeWithReceipt(client, id, onMessage) {
  return new Promise(resolve => {
    const receipt = `${id}-receipt`;
    client.watchForReceipt(receipt, () => resolve());
    client.subscribe(cfg.dest, onMessage, { id, ack: 'client', receipt });
  });
}

async function main() {
  result.phase = 'connect';
  let t = performance.now();
  const { client, frame } = await connect('main');
  lap('connect_ms', t);
  result.subprotocol = client.webSocket ? client.webSocket.protocol : null;
  result.version = frame.headers.version || null;
  result.server = frame.headers.server || null;
  result.heart_beat = frame.headers['heart-beat'] || null;

  let allReceived;
  const done = new Promise(resolve => { allReceived = resolve; });
  const onMessage = msg => {
    const i = result.received++;
    const problems = [];
    if (msg.body !== bodyFor(i)) problems.push(`body ${JSON.stringify(msg.body.slice(0, 40))}`);
    if (msg.headers.seq !== String(i)) problems.push(`seq header ${msg.headers.seq}`);
    if (msg.headers.subscription !== 'sub-main') problems.push(`subscription ${msg.headers.subscription}`);
    if (result.version === '1.2' && !msg.headers.ack) problems.push('no ack header');
    if (problems.length) {
      result.mismatches++;
      fail(`message #${i}: ${problems.join(', ')}`);
    }
    if (i < cfg.count - cfg.unackedTail) {
      msg.ack();
      result.acked++;
    }
    if (result.received === cfg.count) allReceived();
  };

  result.phase = 'subscribe';
  t = performance.now();
  await subscribeWithReceipt(client, 'sub-main', onMessage);
  lap('subscribe_ms', t);

  if (cfg.idleMs > 0) {
    result.phase = 'idle';
    const before = client.stats.pongs;
    await new Promise(resolve => setTimeout(resolve, cfg.idleMs));
    result.heartbeats_in_idle = client.stats.pongs - before;
    if (!client.connected) throw new Error('connection lost while idle');
  }

  result.phase = 'publish+consume';
  t = performance.now();
  for (let i = 0; i < cfg.count; i++) {
    client.publish({ destination: cfg.dest, body: bodyFor(i), headers: { seq: String(i), 'content-type': 'text/plain' } });
  }
  lap('publish_ms', t);
  if (cfg.count > 0) await done;
  lap('roundtrip_ms', t);
  result.msgs_per_s = Math.round(cfg.count / Math.max(result.timing.roundtrip_ms, 1) * 1000);

  // DISCONNECT carries a receipt (stompjs adds one): its RECEIPT means every ACK before it was handled.
  result.phase = 'disconnect';
  t = performance.now();
  client.closing = true;
  await client.deactivate();
  lap('disconnect_ms', t);

  // A second connection must find the queue empty: unacked messages would be redelivered here.
  result.phase = 'verify';
  t = performance.now();
  const second = (await connect('verify')).client;
  result.redelivered = 0;
  const firstUnacked = cfg.count - cfg.unackedTail;
  await subscribeWithReceipt(second, 'sub-verify', msg => {
    const k = result.redelivered++;
    if (k >= cfg.unackedTail || msg.body !== bodyFor(firstUnacked + k)) {
      fail(`unexpected redelivery #${k}: ${JSON.stringify(msg.body.slice(0, 40))}`);
    }
    msg.ack();
  });
  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
  await sleep(cfg.settleMs);
  // Expected redeliveries (unacked_tail) may take a moment longer; extra ones get settle_ms to show.
  for (let waited = 0; result.redelivered < cfg.unackedTail && waited < 5000; waited += 50) await sleep(50);
  second.closing = true;
  await second.deactivate();
  lap('verify_ms', t);
}

setTimeout(() => { fail(`timed out after ${cfg.timeoutMs} ms`); finish(); }, cfg.timeoutMs);
main().catch(err => fail(String(err && err.message || err))).finally(finish);
