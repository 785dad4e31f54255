// tests/bench_serve/fake_openai.mjs — a small fake OpenAI-compatible server
// for testing `aorta bench serve` (plain node:http, no dependencies).
//
// POST /v1/completions and /v1/chat/completions with "stream": true answer
// with SSE chunks (`data: {json}\n\n` ... `data: [DONE]\n\n`), one token per
// chunk, the first after ttft ms and the rest itl ms apart; a final usage
// chunk when stream_options.include_usage is set. prompt_tokens = words in the
// prompt (or in all message contents); completion tokens = max_tokens
// (or max_completion_tokens; default 16).
//
// Behaviour is set by flags and can be overridden per request through the
// model name: "fake?fail=500&every=2&ttft=50&itl=10". Failure modes (applied to
// every `every`-th request with that model name, default every one):
//   500, 429      an OpenAI error body with that status
//   reset         two tokens, then a TCP reset mid-stream
//   malformed     a chunk that is not JSON, then [DONE]
//   nodone        all tokens but no [DONE] (the stream just ends)
//   stream_error  a data: {"error": ...} event
//   hang          never answers
//   huge          one chunk of `huge` bytes of content (default 2 MiB)
//   close         closes the socket before any response
//   garbage       a broken status line written on the raw socket
//   badchunk      a 200 SSE header, then an invalid chunk size
// Connection handling (also through the model name): connclose=1 answers with
// "Connection: close"; endafter=1 closes the socket right after each response;
// idleclose=MS closes it MS ms after the response.
// Usage: node fake_openai.mjs [--port N] [--ttft MS] [--itl MS] [--no-usage]
// Prints "PORT <n>" on stdout once listening (port 0 picks a free one).
import http from 'node:http';

const args = process.argv.slice(2);
const opt = { port: 0, ttft: 0, itl: 0, usage: true };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--port') opt.port = Number(args[++i]);
  else if (a === '--ttft') opt.ttft = Number(args[++i]);
  else if (a === '--itl') opt.itl = Number(args[++i]);
  else if (a === '--no-usage') opt.usage = false;
  else { console.error(`fake_openai: unknown argument ${a}`); process.exit(2); }
}

const counters = new Map();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const words = (s) => (typeof s === 'string' ? s.split(/\s+/).filter(Boolean).length : 0);

function settings(model) {
  const s = { fail: 'none', every: 1, ttft: opt.ttft, itl: opt.itl, usage: opt.usage, huge: 2 << 20,
              connclose: 0, endafter: 0, idleclose: -1 };
  const q = typeof model === 'string' ? model.indexOf('?') : -1;
  if (q >= 0) {
    for (const [k, v] of new URLSearchParams(model.slice(q + 1))) {
      if (k === 'fail') s.fail = v;
      else if (k === 'usage') s.usage = v !== '0';
      else s[k] = Number(v);
    }
  }
  return s;
}

function errorBody(res, status, message) {
  const body = JSON.stringify({ error: { message, type: 'fake_error', code: status } });
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

async function handle(req, res, body) {
  let j;
  try { j = JSON.parse(body); } catch { return errorBody(res, 400, 'bad json'); }
  const chat = req.url === '/v1/chat/completions';
  const s = settings(j.model);
  const n = (counters.get(j.model) || 0) + 1;
  counters.set(j.model, n);
  const fail = n % s.every === 0 ? s.fail : 'none';
  if (fail === '500') return errorBody(res, 500, 'fake internal error');
  if (fail === '429') return errorBody(res, 429, 'fake rate limit');
  if (fail === 'hang') return;
  if (fail === 'close') return req.socket.destroy();
  // Raw bytes past node's HTTP layer: a broken status line, a bad chunk size.
  if (fail === 'garbage') return req.socket.end('HTTP/1.1 2OO OK\r\n\r\n\x00\xff junk');
  if (fail === 'badchunk') {
    return req.socket.end('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n' +
                          'Transfer-Encoding: chunked\r\n\r\nzz\r\ndata: {}\r\n');
  }
  if (!j.stream) return errorBody(res, 400, 'this fake only streams');

  const promptTokens = chat
    ? (j.messages || []).reduce((a, m) => a + words(m.content), 0)
    : words(j.prompt);
  const nOut = j.max_completion_tokens ?? j.max_tokens ?? 16;
  const wantUsage = s.usage && j.stream_options && j.stream_options.include_usage;
  const id = `cmpl-${n}`;
  const chunk = (text, finish) => chat
    ? { id, object: 'chat.completion.chunk', model: j.model,
        choices: [{ index: 0, delta: text === null ? {} : { content: text }, finish_reason: finish }] }
    : { id, object: 'text_completion', model: j.model,
        choices: [{ index: 0, text: text ?? '', finish_reason: finish }] };
  const send = (o) => res.write(`data: ${typeof o === 'string' ? o : JSON.stringify(o)}\n\n`);

  if (s.connclose) res.setHeader('Connection', 'close');
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  res.write(': keep-alive comment\n\n');
  if (chat) send({ id, object: 'chat.completion.chunk', model: j.model,
                   choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
  if (s.ttft) await sleep(s.ttft);
  if (fail === 'huge') { send(chunk('x'.repeat(s.huge), null)); send('[DONE]'); return res.end(); }
  if (fail === 'stream_error') {
    send({ error: { message: 'fake engine failure', type: 'fake_error', code: 500 } });
    send('[DONE]');
    return res.end();
  }
  for (let i = 0; i < nOut; i++) {
    if (i > 0 && s.itl) await sleep(s.itl);
    if (fail === 'reset' && i === 2) return req.socket.resetAndDestroy();
    send(chunk(' tok', i === nOut - 1 ? 'length' : null));
    if (fail === 'malformed' && i === 0) send('{"choices": [ not json');
  }
  if (wantUsage) send({ id, object: chat ? 'chat.completion.chunk' : 'text_completion', model: j.model, choices: [],
                        usage: { prompt_tokens: promptTokens, completion_tokens: nOut,
                                 total_tokens: promptTokens + nOut } });
  if (fail !== 'nodone') send('[DONE]');
  res.end();
  // Keep-alive edge cases: close the connection right after the response (the
  // client may already have sent the next request on it), or once it idles.
  if (s.endafter) req.socket.end();
  else if (s.idleclose >= 0) setTimeout(() => { if (!req.socket.destroyed) req.socket.end(); }, s.idleclose);
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST' || !['/v1/completions', '/v1/chat/completions'].includes(req.url))
    return errorBody(res, 404, 'not found');
  const parts = [];
  req.on('data', (d) => parts.push(d));
  req.on('end', () => { handle(req, res, Buffer.concat(parts).toString()).catch(() => res.destroy()); });
});
server.keepAliveTimeout = 1000;
server.listen(opt.port, '127.0.0.1', () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
