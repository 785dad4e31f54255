// tests/e2e/test_openai.mjs — the official `openai` npm client (pinned in
// package-lock.json) against aorta serve on a generated demo model:
// completions, chat, streaming, include_usage, n=2, stop, logprobs, seeds,
// and error objects. Run by meson through tests/e2e/run_openai.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import OpenAI from 'openai';

const build = process.env.AORTA_BUILD_ROOT ?? 'build';
const aorta = path.join(build, 'server', 'aorta');
const dir = mkdtempSync(path.join(tmpdir(), 'aorta-openai-'));
const model = path.join(dir, 'demo.gguf');
let server;
let client;

before(async () => {
  execFileSync(aorta, ['make-model', '--out', model], { stdio: 'ignore' });
  server = spawn(aorta, ['serve', '--model', model, '--port', '0', '--api-key', 'test-key',
    '--max-model-len', '512', '--threads', '2'], { stdio: ['ignore', 'pipe', 'ignore'] });
  const rl = readline.createInterface({ input: server.stdout });
  const port = await new Promise((resolve, reject) => {
    rl.on('line', (line) => {
      const m = line.match(/listening on port (\d+)/);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${base}/health`)).status === 200) break;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0 });
});

after(async () => {
  const exited = new Promise((r) => server.on('exit', (code) => r(code)));
  server.kill('SIGTERM');
  assert.equal(await exited, 0);
});

test('models.list', async () => {
  const page = await client.models.list();
  assert.equal(page.data[0].id, model);
});

test('completions: text, usage, n=2, seed', async () => {
  const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  const two = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, n: 2,
    temperature: 1, seed: 11 });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  const again = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, n: 2,
    temperature: 1, seed: 11 });
  assert.deepEqual(again.choices.map((c) => c.text), two.choices.map((c) => c.text));
});

test('completions: streaming with include_usage equals non-streaming', async () => {
  const body = { model, prompt: 'Once upon', max_tokens: 16, temperature: 0 };
  const plain = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true,
    stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, plain.choices[0].text);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.deepEqual(usage, plain.usage);
});

test('completions: stop and logprobs', async () => {
  const full = await client.completions.create({ model, prompt: 'abc', max_tokens: 24, temperature: 0 });
  const text = full.choices[0].text;
  if (text.length >= 4) {
    const stop = text.slice(2, 4);
    const r = await client.completions.create({ model, prompt: 'abc', max_tokens: 24,
      temperature: 0, stop: [stop] });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  }
  const lp = await client.completions.create({ model, prompt: 'abc', max_tokens: 4,
    temperature: 0, logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.tokens.length, lp.usage.completion_tokens);
  assert.ok(lp.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
});

test('chat: message, stream with role chunk, logprobs', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }];
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 8,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  let content = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, r.choices[0].message.content);
  assert.deepEqual(usage, r.usage);
});

test('errors surface as APIError with status and param', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 100000 }),
    (e) => e.status === 400 && /maximum context length/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 2 }),
    (e) => e.status === 400);
  await assert.rejects(
    client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 }),
    (e) => e.status === 404);
  const bad = new OpenAI({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});
