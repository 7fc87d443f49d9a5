// server.test.mjs: the demo server's choices made explicit (issue 22, item 7): a client that sends
// half a request is cut off after the header timeout (Node's default kept it for a minute and
// more), and every response -- a 404 naming the path included -- carries
// X-Content-Type-Options: nosniff, the 404's path quoted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { request } from 'node:http';
import { once } from 'node:events';
import { startServer, TIMEOUTS } from '../../demo/serve.mjs';

const get = (port, p) =>
  new Promise((res, rej) => {
    const req = request({ host: '127.0.0.1', port, path: p }, (r) => {
      let body = '';
      r.on('data', (d) => {
        body += d;
      });
      r.on('end', () => res({ status: r.statusCode, body, headers: r.headers }));
    });
    req.on('error', rej);
    req.end();
  });

test('demo server: half-sent requests are closed after the header timeout; nosniff on every response', async (t) => {
  assert.ok(TIMEOUTS.headers <= 10000 && TIMEOUTS.request <= 30000, JSON.stringify(TIMEOUTS));
  const { server } = await startServer({ port: 0, timeouts: { headers: 500, request: 1000, check: 100 } });
  t.after(() => server.close());
  const port = server.address().port;
  // a request line and one header, then nothing: the server closes the connection
  const sock = connect(port, '127.0.0.1');
  await once(sock, 'connect');
  sock.write('GET /demo/ HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  let reply = '';
  sock.on('data', (d) => {
    reply += d;
  });
  const t0 = Date.now();
  const [closed] = await Promise.race([
    once(sock, 'close'),
    new Promise((r) => setTimeout(() => r(['timeout']), 20000)),
  ]);
  assert.notEqual(closed, 'timeout', 'the half-sent request was kept open');
  assert.ok(Date.now() - t0 < 10000);
  assert.match(reply, /^HTTP\/1\.1 408|^$/); // Node answers 408 Request Timeout, or just closes
  for (const p of ['/demo/no-such-file.html', '/%3Cscript%3Ealert(1)%3C%2Fscript%3E', '/demo/%3Cb%3E.html']) {
    const r = await get(port, p);
    assert.equal(r.status, 404);
    assert.equal(r.headers['x-content-type-options'], 'nosniff', p);
    assert.match(r.headers['content-type'], /^text\/plain/);
    assert.equal(r.body, `not found: ${JSON.stringify(decodeURIComponent(p))}\n`);
  }
  const bad = await get(port, '/%E0%A4%A');
  assert.equal(bad.status, 400);
  assert.equal(bad.headers['x-content-type-options'], 'nosniff');
});

// a raw socket that writes `first`, then one byte of `drip` a second: how long until the server
// closes it (null: still open after `limit` ms)
async function dripped(port, first, drip, limit) {
  const sock = connect(port, '127.0.0.1');
  await once(sock, 'connect');
  sock.on('data', () => {});
  sock.on('error', () => {});
  if (first) sock.write(first);
  const t0 = Date.now();
  let i = 0;
  const timer = setInterval(() => sock.destroyed || sock.write(drip[i++ % drip.length]), 1000);
  const closed = await Promise.race([
    once(sock, 'close').then(() => Date.now() - t0),
    new Promise((r) => setTimeout(() => r(null), limit)),
  ]);
  clearInterval(timer);
  sock.destroy();
  return closed;
}

test('demo server: slowloris sockets dripping a byte a second are closed at the header limit (issue 39, item 15)', async (t) => {
  const { server } = await startServer({
    port: 0,
    timeouts: { headers: 2000, request: 4000, keepAlive: 1000, check: 100 },
  });
  t.after(() => server.close());
  const port = server.address().port;
  const request = 'GET /demo/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
  const [headers, between, lf] = await Promise.all([
    // a request's headers, a byte at a time
    dripped(port, '', 'GET /demo/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 9000),
    // a request answered, then blank lines between requests (each one reset the keep-alive timeout)
    dripped(port, request, '\r\n', 9000),
    dripped(port, request, '\n', 9000),
  ]);
  for (const [what, ms] of Object.entries({ headers, between, lf }))
    assert.ok(ms != null && ms < 5000, `${what}: ${ms == null ? 'still open after 9 s' : `closed after ${ms} ms`}`);
  // a client that sends its requests in time is served on one connection
  const sock = connect(port, '127.0.0.1');
  await once(sock, 'connect');
  let reply = '';
  sock.on('data', (d) => (reply += d));
  for (let k = 0; k < 3; k++) {
    sock.write(request);
    await new Promise((r) => setTimeout(r, 500));
  }
  assert.equal(reply.match(/HTTP\/1\.1 200 OK/g).length, 3);
  assert.equal(sock.destroyed, false);
  sock.destroy();
});
