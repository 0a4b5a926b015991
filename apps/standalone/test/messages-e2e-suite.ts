import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { minimalPdf, type FakeUpstream } from '@gateway/testing';
import { ctlJson } from './configured-stack.js';
import { startChatHarness, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient, type UpstreamKind } from './messages-e2e-harness.js';

/*
 * The stack the messages e2e files run against, once per upstream kind (messages-e2e-harness.ts): the
 * catalog, three fake upstreams (two that answer, one that is down), a loopback file server for documents
 * by URL and an account too poor to be admitted. `messagesSuite` registers the hooks in the calling
 * describe and hands back what the tests read.
 */

export const CHAT = 'testco/chat';
export const DUAL = 'testco/dual';
/** Models whose charges the tests count: only requests wrapped in `oneCharge` use them, one at a time. */
export const BILLED = 'testco/billed';
export const QUIET = 'testco/quiet';
export const INPUT_PRICE = '0.000001';
export const CACHED_PRICE = '0.0000002';
export const OUTPUT_PRICE = '0.000002';
/** Long enough that no ordinary answer meets it; the ping tests wait past it. */
export const PING_INTERVAL_MS = 1_500;

function catalog(kind: UpstreamKind, primary: FakeUpstream, secondary: FakeUpstream, down: FakeUpstream): string {
  const model = (id: string, offers: string[], extra = '') => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: [text, image]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, temperature, top_p, stop, max_tokens, max_completion_tokens, reasoning, response_format, stream_options]
    reasoning_efforts: [low, medium, high]
    pricing: { per_input_token: "${INPUT_PRICE}", per_cached_input_token: "${CACHED_PRICE}", per_output_token: "${OUTPUT_PRICE}" }${extra}
    offers:${offers.map((provider) => `
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-upstream, endpoints: [chat.completions, messages] }`).join('')}`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
${kind.provider('primary', primary, 'MESSAGES_E2E_KEY')}
${kind.provider('secondary', secondary, 'MESSAGES_E2E_KEY')}
${kind.provider('down', down, 'MESSAGES_E2E_KEY')}
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 1000 } }
  - id: premium
    tiers: { tier-4: { minute: 1000 } }
  - id: tight
    tiers: { tier-1: { minute: 1 } }
models:${model(CHAT, ['primary'], '\n    limit_group: default')}${model(BILLED, ['primary'], '\n    limit_group: default')}${model(QUIET, ['primary'], '\n    limit_group: default')}${model(DUAL, ['primary', 'secondary'], '\n    limit_group: default')}${model(
    'testco/premium',
    ['primary'],
    '\n    limit_group: premium',
  )}${model('testco/tight', ['primary'], '\n    limit_group: tight')}${model('testco/nowhere', ['down'], '\n    limit_group: default')}${model(
    'testco/retired',
    ['primary'],
    '\n    limit_group: default\n    expires_at: 1700000000',
  )}
`;
}

/** What a messages e2e test reads; the fields are set once the suite's beforeAll ran. */
export interface MessagesSuite {
  primary: FakeUpstream;
  secondary: FakeUpstream;
  down: FakeUpstream;
  harness: ChatHarness;
  client: Anthropic;
  filesUrl: string;
  poorKey: string;
  readonly pdfText: string;
  messagesUrl(): string;
  keyHeaders(): Record<string, string>;
  received(upstream: FakeUpstream, index?: number): ReturnType<UpstreamKind['conversation']>;
  /** Runs `request` and returns the one charge it made (the ledger's own view). */
  oneCharge(model: string, request: () => Promise<unknown>): Promise<bigint>;
}

/** Starts the stack of `kind` before the calling describe's tests, stops it after, resets the answering fakes before each test. */
export function messagesSuite(kind: UpstreamKind): MessagesSuite {
  let primary: FakeUpstream;
  let secondary: FakeUpstream;
  let down: FakeUpstream;
  let harness: ChatHarness;
  let files: Server;
  const pdfText = 'Quarterly revenue grew by forty percent';
  const suite: MessagesSuite = {
    primary: undefined as unknown as FakeUpstream,
    secondary: undefined as unknown as FakeUpstream,
    down: undefined as unknown as FakeUpstream,
    harness: undefined as unknown as ChatHarness,
    client: undefined as unknown as Anthropic,
    filesUrl: '',
    poorKey: '',
    pdfText,
    messagesUrl: () => `${harness.stack.url}/v1/messages`,
    keyHeaders: () => ({ 'x-api-key': harness.apiKey, 'anthropic-version': '2023-06-01' }),
    received: (upstream, index = 0) => kind.conversation(upstream.requests[index]!),
    async oneCharge(model, request) {
      const before = await harness.charges(model);
      await request();
      const after = await harness.chargesSettleAt(model, before.requests + 1);
      return after.costPico - before.costPico;
    },
  };

  beforeAll(async () => {
    primary = await kind.start();
    secondary = await kind.start();
    down = await kind.start();
    down.setFallback({ status: 500 });
    const pdf = minimalPdf([pdfText]);
    // Documents by URL: a loopback server, reachable only because this stack's media service allows loopback for tests.
    files = createServer((request, response) => {
      if (request.url === '/notes.txt') {
        response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
        response.end('Meeting notes: ship on Friday.');
      } else if (request.url === '/report.pdf') {
        response.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(pdf.length) });
        response.end(pdf);
      } else {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    suite.filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    harness = await startChatHarness({
      configYaml: catalog(kind, primary, secondary, down),
      providerSecrets: { MESSAGES_E2E_KEY: 'sk-messages-e2e' },
      media: { allowLoopbackUrlsForTests: true },
      edge: { streamPingIntervalMs: PING_INTERVAL_MS },
      routing: { attemptTimeoutMs: 8_000, maxAttempts: 3 },
    });
    suite.client = anthropicClient(harness.stack.url, harness.apiKey);
    const poor = await ctlJson(harness.stack, 'accounts', 'create', '--name', 'messages-poor', '--credits', '0.01', '--tier', 'tier-1', '--json');
    suite.poorKey = (await ctlJson(harness.stack, 'keys', 'create', poor.account_id!, '--name', 'poor-key', '--json')).api_key!;
    Object.assign(suite, { primary, secondary, down, harness });
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    for (const upstream of [primary, secondary, down]) await upstream?.close();
    files?.closeAllConnections();
    await new Promise((resolve) => files?.close(resolve));
  });

  beforeEach(() => {
    for (const upstream of [primary, secondary]) {
      upstream.reset();
      upstream.setFallback({});
    }
  });

  return suite;
}
