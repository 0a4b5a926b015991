#!/usr/bin/env node
// Requests through the edge of a running stack (deploy/ci/images.sh runs it against the containers).
// Prints one `PASS name` or `FAIL name: why` line per check; exit 1 when any failed.
//   EDGE_URL=http://127.0.0.1:8080 API_KEY=... PROV_KEY=... node deploy/ci/smoke.mjs requests
//   ... node deploy/ci/smoke.mjs console          (the web console and its headers)
//   ... GATEWAY_ADMIN_TOKEN=... GATEWAY_INTERNAL_TOKEN=... node deploy/ci/smoke.mjs admin ACCOUNT_ID
//   ... node deploy/ci/smoke.mjs balance          (prints the account's balance, for the restart check)
//   ... node deploy/ci/smoke.mjs drain CONTAINER  (docker stop of the edge with a request in flight)
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const edge = process.env.EDGE_URL ?? 'http://127.0.0.1:8080';
const apiKey = process.env.API_KEY ?? '';
const provisioningKey = process.env.PROV_KEY ?? '';
const docker = process.env.DOCKER ?? 'docker';
let failed = 0;

function report(name, ok, detail = '') {
  if (ok) process.stdout.write(`PASS ${name}${detail ? ` (${detail})` : ''}\n`);
  else { failed += 1; process.stdout.write(`FAIL ${name}: ${detail}\n`); }
}

async function check(name, body) {
  try {
    const detail = await body();
    report(name, true, typeof detail === 'string' ? detail : '');
  } catch (error) {
    report(name, false, error instanceof Error ? error.message : String(error));
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

const json = (body, headers = {}) => ({
  method: 'POST',
  headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

async function post(path, body, headers) {
  const response = await fetch(`${edge}${path}`, json(body, headers));
  return response;
}

/** The SSE events of a whole answer: [{ event, data }], data as text. */
async function sse(response) {
  if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  assert((response.headers.get('content-type') ?? '').startsWith('text/event-stream'), `content-type ${response.headers.get('content-type')}`);
  const text = await response.text();
  return text.split(/\r?\n\r?\n/).filter((block) => block.trim()).map((block) => {
    let event = 'message';
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    return { event, data: data.join('\n') };
  });
}

/** One second of a 440 Hz tone as 16-bit mono PCM WAV at 16 kHz. */
function wav() {
  const rate = 16_000;
  const samples = rate;
  const buffer = Buffer.alloc(44 + samples * 2);
  buffer.write('RIFF', 0); buffer.writeUInt32LE(36 + samples * 2, 4); buffer.write('WAVE', 8);
  buffer.write('fmt ', 12); buffer.writeUInt32LE(16, 16); buffer.writeUInt16LE(1, 20); buffer.writeUInt16LE(1, 22);
  buffer.writeUInt32LE(rate, 24); buffer.writeUInt32LE(rate * 2, 28); buffer.writeUInt16LE(2, 32); buffer.writeUInt16LE(16, 34);
  buffer.write('data', 36); buffer.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) buffer.writeInt16LE(Math.round(Math.sin((2 * Math.PI * 440 * i) / rate) * 12_000), 44 + i * 2);
  return buffer;
}

let storedResponseId = '';

async function requests() {
  await check('chat completion', async () => {
    const response = await post('/v1/chat/completions', { model: 'chat-small', messages: [{ role: 'user', content: 'Say hello' }] });
    const body = await response.json();
    assert(response.status === 200, `HTTP ${response.status}: ${JSON.stringify(body)}`);
    assert(typeof body.choices?.[0]?.message?.content === 'string' && body.choices[0].message.content.length > 0, 'no content');
    assert(body.choices[0].finish_reason, 'no finish_reason');
    return `${body.usage?.completion_tokens} completion tokens`;
  });

  await check('streamed chat ends with a finish_reason chunk, then [DONE]', async () => {
    const events = await sse(await post('/v1/chat/completions', {
      model: 'chat-small', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Tell me about gateways in some detail' }],
    }));
    assert(events.at(-1)?.data === '[DONE]', `last event ${JSON.stringify(events.at(-1))}`);
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event.data));
    const finish = chunks.findIndex((chunk) => chunk.choices?.[0]?.finish_reason);
    assert(finish >= 0, `no finish_reason in ${chunks.length} chunks`);
    const text = chunks.map((chunk) => chunk.choices?.[0]?.delta?.content ?? '').join('');
    assert(text.length > 0, 'no text');
    return `${chunks.length} chunks, finish_reason ${chunks[finish].choices[0].finish_reason}`;
  });

  await check('messages stream ends with message_stop', async () => {
    const events = await sse(await post('/v1/messages', {
      model: 'chat-small', max_tokens: 256, stream: true, messages: [{ role: 'user', content: 'Tell me about gateways in some detail' }],
    }, { 'anthropic-version': '2023-06-01' }));
    const names = events.map((event) => event.event);
    assert(names[0] === 'message_start', `first event ${names[0]}`);
    assert(names.at(-1) === 'message_stop', `last event ${names.at(-1)} of ${names.length}`);
    const delta = events.find((event) => event.event === 'message_delta');
    assert(delta && JSON.parse(delta.data).delta?.stop_reason, 'no message_delta with a stop_reason');
    return `${names.length} events`;
  });

  await check('responses stream ends with response.completed', async () => {
    const events = await sse(await post('/v1/responses', { model: 'chat-small', stream: true, input: 'Tell me about gateways in some detail' }));
    const names = events.map((event) => event.event);
    assert(names.at(-1) === 'response.completed', `last event ${names.at(-1)} of ${names.length}`);
    const completed = JSON.parse(events.at(-1).data);
    assert(completed.response?.status === 'completed', `status ${completed.response?.status}`);
    storedResponseId = completed.response.id;
    return `${names.length} events`;
  });

  // Stored responses are written behind the answer by the edge to the jobs service: it must reach it.
  await check('the streamed response is stored: GET /v1/responses/{id}', async () => {
    let response;
    for (let attempt = 0; attempt < 20; attempt++) {
      response = await fetch(`${edge}/v1/responses/${storedResponseId}`, { headers: { authorization: `Bearer ${apiKey}` } });
      if (response.status === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const body = await response.json();
    assert(response.status === 200 && body.id === storedResponseId && body.status === 'completed', `HTTP ${response.status}: ${JSON.stringify(body).slice(0, 300)}`);
    return body.id;
  });

  await check('files: upload, read back, delete (the jobs service)', async () => {
    const form = new FormData();
    form.append('purpose', 'user_data');
    const text = 'images check file\n';
    form.append('file', new Blob([text], { type: 'text/plain' }), 'images-check.txt');
    const created = await fetch(`${edge}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: form });
    const file = await created.json();
    assert(created.status === 200, `upload HTTP ${created.status}: ${JSON.stringify(file).slice(0, 300)}`);
    const content = await fetch(`${edge}/v1/files/${file.id}/content`, { headers: { authorization: `Bearer ${apiKey}` } });
    const back = await content.text();
    assert(content.status === 200 && back === text, `content HTTP ${content.status}: ${JSON.stringify(back.slice(0, 100))}`);
    const deleted = await fetch(`${edge}/v1/files/${file.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${apiKey}` } });
    assert(deleted.status === 200, `delete HTTP ${deleted.status}`);
    return `${file.id}, ${file.bytes} bytes`;
  });

  await check('speech', async () => {
    const response = await post('/v1/audio/speech', { model: 'orbit/speech-1', voice: 'alloy', input: 'Hello from the images check', response_format: 'wav' });
    const bytes = Buffer.from(await response.arrayBuffer());
    assert(response.status === 200, `HTTP ${response.status}: ${bytes.toString('utf8', 0, 300)}`);
    assert(bytes.length > 1000 && bytes.toString('latin1', 0, 4) === 'RIFF', `${bytes.length} bytes, starts ${JSON.stringify(bytes.toString('latin1', 0, 4))}`);
    return `${bytes.length} bytes of WAV`;
  });

  await check('transcription', async () => {
    const form = new FormData();
    form.append('model', 'orbit/transcribe-1');
    form.append('file', new Blob([wav()], { type: 'audio/wav' }), 'tone.wav');
    const response = await fetch(`${edge}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: form });
    const body = await response.json();
    assert(response.status === 200, `HTTP ${response.status}: ${JSON.stringify(body)}`);
    assert(typeof body.text === 'string', `no text in ${JSON.stringify(body)}`);
    return `text ${JSON.stringify(body.text.slice(0, 40))}`;
  });

  await check('image with a hosted URL, fetched', async () => {
    const response = await post('/v1/images/generations', { model: 'image-1', prompt: 'a lighthouse at dusk', size: '1024x1024', response_format: 'url' });
    const body = await response.json();
    assert(response.status === 200, `HTTP ${response.status}: ${JSON.stringify(body)}`);
    const url = body.data?.[0]?.url;
    assert(typeof url === 'string', `no url in ${JSON.stringify(body).slice(0, 300)}`);
    // The edge's EDGE_PUBLIC_URL is the origin of hosted image URLs.
    if (process.env.EDGE_PUBLIC_URL) assert(url.startsWith(`${process.env.EDGE_PUBLIC_URL}/`), `${url} is not under EDGE_PUBLIC_URL ${process.env.EDGE_PUBLIC_URL}`);
    const image = await fetch(url);
    const bytes = Buffer.from(await image.arrayBuffer());
    assert(image.status === 200, `GET ${url}: HTTP ${image.status}`);
    assert(bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), `GET ${url}: not a PNG (${image.headers.get('content-type')})`);
    return `${url} -> ${bytes.length} bytes of PNG`;
  });
}

/** The web console the edge image serves (apps/console/dist copied by the Dockerfile's console stage). */
async function consoleApp() {
  await check('console: /console/ served with its CSP, and its script', async () => {
    const page = await fetch(`${edge}/console/`);
    const html = await page.text();
    assert(page.status === 200, `GET /console/: HTTP ${page.status}`);
    assert((page.headers.get('content-type') ?? '').startsWith('text/html'), `content-type ${page.headers.get('content-type')}`);
    const policy = page.headers.get('content-security-policy') ?? '';
    assert(policy.includes("default-src 'self'") && policy.includes("frame-ancestors 'none'"), `content-security-policy ${JSON.stringify(policy)}`);
    const script = /<script[^>]+src="([^"]+)"/.exec(html)?.[1];
    assert(script, 'index.html names no script');
    const asset = await fetch(new URL(script, `${edge}/console/`));
    const code = await asset.text();
    assert(asset.status === 200 && (asset.headers.get('content-type') ?? '').includes('javascript') && code.length > 1000,
      `GET ${script}: HTTP ${asset.status}, ${asset.headers.get('content-type')}, ${code.length} bytes`);
    return `${script}: ${code.length} bytes`;
  });
}

/**
 * The operator routes (/v1/admin/) with the admin token the stack runs with: a top-up raises the balance by
 * exactly its amount; the internal service token is refused (the edge holds no admin token of its own).
 */
async function adminRoutes(accountId) {
  const admin = process.env.GATEWAY_ADMIN_TOKEN ?? '';
  const service = process.env.GATEWAY_INTERNAL_TOKEN ?? '';
  const call = (path, token, init = {}) => fetch(`${edge}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...init.headers } });
  await check('admin: top-up through POST /v1/admin/accounts/{id}/credits', async () => {
    const before = await (await call(`/v1/admin/accounts?limit=100`, admin)).json();
    const row = before.data?.find((account) => account.id === accountId);
    assert(row, `account ${accountId} not in ${JSON.stringify(before).slice(0, 300)}`);
    const response = await call(`/v1/admin/accounts/${accountId}/credits`, admin, { method: 'POST', body: JSON.stringify({ amount: '2.5' }) });
    const body = await response.json();
    assert(response.status === 200, `HTTP ${response.status}: ${JSON.stringify(body)}`);
    // Decimal strings to pico (10^-12) as integers: money is never a float.
    const pico = (value) => { const [whole, fraction = ''] = String(value).split('.'); return BigInt(whole) * 10n ** 12n + BigInt(fraction.padEnd(12, '0')); };
    assert(pico(body.balance) - pico(row.balance) === 2_500_000_000_000n, `balance ${row.balance} -> ${body.balance}`);
    return `${row.balance} -> ${body.balance}`;
  });
  await check('admin: the service token is refused (403), no token 401', async () => {
    const withService = await call('/v1/admin/providers', service);
    const withNone = await fetch(`${edge}/v1/admin/providers`);
    assert(withService.status === 403, `service token: HTTP ${withService.status}`);
    assert(withNone.status === 401, `no token: HTTP ${withNone.status}`);
  });
}

async function balance() {
  const response = await fetch(`${edge}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
  const body = await response.json();
  if (response.status !== 200) throw new Error(`balance: HTTP ${response.status} ${JSON.stringify(body)}`);
  process.stdout.write(`${body.balance}\n`);
}

async function drain(container) {
  // A speech request in flight when the edge gets SIGTERM must finish; `docker stop` must return
  // before the grace period ends, and the container exit 0.
  const speech = await post('/v1/audio/speech', { model: 'orbit/speech-1', voice: 'alloy', response_format: 'wav', input: Array.from({ length: 150 }, (_, i) => `word${i}`).join(' ') });
  const started = performance.now();
  const stop = promisify(execFile)(docker, ['stop', container]);
  const bytes = Buffer.from(await speech.arrayBuffer());
  await check('request in flight at docker stop of the edge completes', async () => {
    assert(speech.status === 200, `HTTP ${speech.status}`);
    assert(bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.length > 10_000, `${bytes.length} bytes`);
    return `${bytes.length} bytes`;
  });
  await check('docker stop of the edge drains within the grace period', async () => {
    await stop;
    const seconds = (performance.now() - started) / 1000;
    const { stdout } = await promisify(execFile)(docker, ['inspect', '-f', '{{.State.ExitCode}} {{.Config.StopTimeout}}', container]);
    const [exitCode, stopTimeout] = stdout.trim().split(' ');
    assert(exitCode === '0', `exit code ${exitCode}`);
    assert(seconds < Number(stopTimeout), `${seconds.toFixed(1)} s, grace ${stopTimeout} s`);
    return `stopped in ${seconds.toFixed(1)} s, exit 0, grace ${stopTimeout} s`;
  });
}

const [mode, argument] = process.argv.slice(2);
if (mode === 'requests') await requests();
else if (mode === 'console') await consoleApp();
else if (mode === 'admin' && argument) await adminRoutes(argument);
else if (mode === 'balance') await balance();
else if (mode === 'drain' && argument) await drain(argument);
else { process.stderr.write('usage: smoke.mjs requests | console | admin ACCOUNT_ID | balance | drain CONTAINER\n'); process.exit(2); }
process.exit(failed > 0 ? 1 : 0);
