// CPU per request of the Bedrock adapter alone against the bench's fast upstream (not part of the build).
// Usage: node scripts/bench-bedrock-adapter.mjs <routing dist dir> <upstream port> [requests] [concurrency] [bedrock|openai] [deltas]
// deltas (openai only): streams of that many content deltas sent back to back (the fast upstream's `[deltas D gap 0]`);
// then the whole answers are the usual one and {"stream":µs} is per stream of D deltas.
// Prints {"whole":µs,"stream":µs} of this process's CPU (user + system) per request, after a warm-up of both.
// The upstream: BENCH_FIRST_CHUNK_GAP_MS=0 node apps/standalone/dist/bench/fake-upstream-process.js (prints its port).
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';

const [distDir, port, requestsText = '4000', concurrencyText = '8', wire = 'bedrock', deltasText = ''] = process.argv.slice(2);
const deltas = wire === 'openai' && deltasText !== '' ? Number(deltasText) : 0;
const load = (path) => import(pathToFileURL(resolve(distDir, path)).href);
const adapter = wire === 'openai'
  ? new (await load('providers/openai/openai-adapter.js')).OpenAIAdapter({ providerId: 'bench', baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: 'k' })
  : new (await load('providers/bedrock/bedrock-adapter.js')).BedrockAdapter({
    providerId: 'bench', region: 'us-east-1', baseUrl: `http://127.0.0.1:${port}`,
    accessKeyId: 'AKIABENCHBENCHBENCH0', secretAccessKey: 'bench/secret/bench/secret/bench/secret/0', connections: 16,
  });
const chat = {
  context: { requestId: 'req_bench', accountId: 'acc', keyId: 'key' }, modelId: 'bench', routingStrategy: '', endpoint: 'chat.completions',
  messages: [{ role: 'user', content: [{ part: { $case: 'text', value: 'Say hello.' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
  tools: [], stop: [], includeUsage: true, timeoutMs: 0, maxOutputTokens: 64,
};
const request = { upstreamModel: 'bench.upstream-model-v1:0', chat, modelMaxOutputTokens: undefined };
const pacedChat = { ...chat, messages: [{ ...chat.messages[0], content: [{ part: { $case: 'text', value: `Say hello. [deltas ${deltas} gap 0]` } }] }] };
const streamRequest = deltas > 0 ? { ...request, chat: pacedChat } : request;
const expectedText = deltas > 0 ? Array.from({ length: deltas }, (_, index) => (index === 0 ? 'w0' : ` w${index}`)).join('') : 'Hello from the bench upstream.';
const signal = new AbortController().signal;

async function once(stream) {
  if (!stream) {
    const result = await adapter.chat(request, signal);
    if (result.choices[0].message.content !== 'Hello from the bench upstream.') throw new Error('wrong answer');
    return;
  }
  let text = '';
  let usage;
  for await (const part of adapter.chatStream(streamRequest, signal)) {
    if (part.type === 'delta') text += part.delta.content;
    else usage = part.usage;
  }
  if (text !== expectedText || !usage) throw new Error('wrong stream');
}

async function run(stream, count, concurrency) {
  let next = 0;
  const worker = async () => { while (next++ < count) await once(stream); };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

async function measure(stream, count, concurrency) {
  const before = process.cpuUsage();
  await run(stream, count, concurrency);
  const used = process.cpuUsage(before);
  return Math.round((used.user + used.system) / count);
}

const requests = Number(requestsText);
const concurrency = Number(concurrencyText);
await run(false, Math.ceil(requests / 2), concurrency);
await run(true, Math.ceil(requests / 2), concurrency);
const whole = await measure(false, requests, concurrency);
const stream = await measure(true, requests, concurrency);
console.log(JSON.stringify({ whole, stream }));
await adapter.close();
