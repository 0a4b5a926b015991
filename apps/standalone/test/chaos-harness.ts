import type { ChildProcess } from 'node:child_process';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { Agent, fetch as clientFetch } from 'undici';
import { parseCredits } from '@gateway/platform';
import type { FakeUpstream } from '@gateway/testing';
import { oneProviderCatalog, paidTextModel } from './catalog-yaml.js';

// The chaos test's parts (chaos.e2e.test.ts): a seeded random source, a round-robin TCP balancer in
// front of the edges, the traffic (one record per request sent) and the checks run on the records
// afterwards. The processes themselves are started by process-stack.ts.

export const CHAT_MODEL = 'chaosco/chat';
export const EMBED_MODEL = 'chaosco/embed';
export const UPSTREAM_KEY_ENV = 'CHAOS_UPSTREAM_KEY';
/** What admission holds for each of the test's requests (their worst case is below the flat minimum). */
export const HOLD_PICO = parseCredits('0.05');

export function chaosCatalog(upstream: FakeUpstream): string {
  return oneProviderCatalog({
    startup: 'chaosco', displayName: 'Chaos Co', provider: 'chaos-upstream', upstream, keyEnv: UPSTREAM_KEY_ENV, perMinute: 100000,
    models: [
      paidTextModel({
        id: CHAT_MODEL, owner: 'chaosco', provider: 'chaos-upstream', upstreamModel: 'chaos-chat', endpoints: ['chat.completions', 'messages', 'responses'],
        extra: ['context_window: 4096', 'max_output_tokens: 64'],
      }),
      `  - id: ${EMBED_MODEL}
    owned_by: chaosco
    created: 1767225600
    context_window: 4096
    input_modalities: [text]
    output_modalities: [embeddings]
    supported_parameters: [dimensions, encoding_format]
    pricing: { per_input_token: "0.0000003" }
    limit_group: default
    offers:
      - { provider: chaos-upstream, upstream_model: chaos-embed, endpoints: [embeddings] }
`,
    ],
  });
}

/**
 * Streams last about 300 ms (8 chunks 40 ms apart) so that kills find some mid-way; answers take 60 ms.
 * Returns the tags (`chaos <tag>` in each prompt) of every request the provider received.
 */
export function chaosUpstreamScript(upstream: FakeUpstream): Set<string> {
  const seen = new Set<string>();
  upstream.setFallback((request) => {
    const tag = /chaos (\d+-\d+)/.exec(JSON.stringify(request.body ?? ''))?.[1];
    if (tag) seen.add(tag);
    return request.body?.stream === true
    ? { text: ' chaos'.repeat(8), chunkCount: 8, chunkDelayMs: 40, usage: { prompt_tokens: 12, completion_tokens: 8 } }
    : { latencyMs: 60, text: ' chaos'.repeat(6), usage: { prompt_tokens: 12, completion_tokens: 6 } };
  });
  return seen;
}

/** mulberry32: a small seeded generator, so a failing run is repeated by its seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * A round-robin TCP balancer over the edges, as a Kubernetes Service: it sends a new connection only to
 * an edge whose `/readyz` answered 200 at its last probe (every 250 ms) and that the test has not taken
 * out (a terminating pod's endpoint is removed when the pod is deleted, as SIGTERM is sent); a refused
 * connection goes to the next edge. Each connection stays on the edge it was sent to, as with kube-proxy.
 */
export interface Balancer {
  url: string;
  /** Takes an edge out of rotation (the endpoint controller's removal of a terminating pod). */
  remove(index: number): void;
  /** Connections that no edge accepted (every one refused). */
  refusedConnections: number;
  close(): Promise<void>;
}

export async function startBalancer(edgePorts: number[]): Promise<Balancer> {
  const ready = edgePorts.map(() => true);
  const removed = edgePorts.map(() => false);
  const sockets = new Set<Socket>();
  let next = 0;
  let stopped = false;
  const probe = async (index: number) => {
    try {
      const response = await fetch(`http://127.0.0.1:${edgePorts[index]}/readyz`, { signal: AbortSignal.timeout(1_000) });
      await response.arrayBuffer();
      ready[index] = response.status === 200;
      if (ready[index]) removed[index] = false;
    } catch {
      ready[index] = false;
    }
  };
  const prober = setInterval(() => { if (!stopped) for (let index = 0; index < edgePorts.length; index++) void probe(index); }, 250);
  const balancer: Balancer = {
    url: '',
    refusedConnections: 0,
    remove: (index) => { removed[index] = true; ready[index] = false; },
    close: async () => {
      stopped = true;
      clearInterval(prober);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer((client) => {
    client.pause();
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    // In rotation first (round robin), then any edge not taken out: a Service with no ready endpoint refuses, but
    // a probe 250 ms old must not refuse a connection an edge would take.
    const start = next++;
    const order = [...edgePorts.keys()].map((offset) => (start + offset) % edgePorts.length);
    const candidates = [...order.filter((index) => ready[index] && !removed[index]), ...order.filter((index) => !ready[index] && !removed[index])];
    const attempt = (position: number) => {
      if (position >= candidates.length) {
        balancer.refusedConnections++;
        client.destroy();
        return;
      }
      const upstream = connect(edgePorts[candidates[position]!]!, '127.0.0.1');
      sockets.add(upstream);
      let connected = false;
      upstream.once('connect', () => {
        connected = true;
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
      upstream.on('error', () => {
        if (!connected) attempt(position + 1);
        else client.destroy();
      });
      upstream.on('close', () => {
        sockets.delete(upstream);
        if (connected) client.end();
      });
      client.on('close', () => upstream.destroy());
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  balancer.url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return balancer;
}

export type RequestKind = 'chat' | 'chat-stream' | 'messages-stream' | 'responses' | 'embeddings';
export const REQUEST_KINDS: RequestKind[] = ['chat', 'chat-stream', 'messages-stream', 'responses', 'embeddings'];

/**
 * One request sent and what became of it:
 * - `answered`: a complete 200 answer with its usage.cost (pico-credits);
 * - `refused`: an HTTP error status (with Retry-After and the body);
 * - `stream-error`: a 200 stream that ended with the dialect's error event (broken mid-way);
 * - `cut`: the connection ended with no complete answer (before the status line, or mid-body);
 * - `timeout`: no answer within the client's 60 s.
 */
export interface RequestRecord {
  account: number;
  /** Unique per request; the prompt carries it as `chaos <tag>`. */
  tag: string;
  kind: RequestKind;
  startAt: number;
  /** When the status line arrived (undefined: it never did). */
  headersAt?: number;
  endAt: number;
  outcome: 'answered' | 'refused' | 'stream-error' | 'cut' | 'timeout';
  status?: number;
  retryAfter?: string | null;
  body?: string;
  requestId?: string | null;
  costPico?: bigint;
  /** Error code of a 402 (insufficient_quota) or of a stream's error event. */
  detail?: string;
}

const REQUEST_TIMEOUT_MS = 60_000;

function requestFor(kind: RequestKind, tag: string): { path: string; headers: Record<string, string>; body: unknown } {
  const content = `chaos ${tag}`;
  switch (kind) {
    case 'chat': return { path: '/v1/chat/completions', headers: {}, body: { model: CHAT_MODEL, messages: [{ role: 'user', content }], max_completion_tokens: 32 } };
    case 'chat-stream': return {
      path: '/v1/chat/completions', headers: {},
      body: { model: CHAT_MODEL, messages: [{ role: 'user', content }], max_completion_tokens: 32, stream: true, stream_options: { include_usage: true } },
    };
    case 'messages-stream': return {
      path: '/v1/messages', headers: { 'anthropic-version': '2023-06-01' },
      body: { model: CHAT_MODEL, max_tokens: 32, messages: [{ role: 'user', content }], stream: true },
    };
    case 'responses': return { path: '/v1/responses', headers: {}, body: { model: CHAT_MODEL, input: content, max_output_tokens: 32 } };
    case 'embeddings': return { path: '/v1/embeddings', headers: {}, body: { model: EMBED_MODEL, input: content } };
  }
}

/** Server-sent events of a finished body: each event's name (or '') and its parsed data (or the raw text). */
function sseEvents(text: string): Array<{ event: string; data: any }> {
  const events: Array<{ event: string; data: any }> = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event = '';
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
    }
    if (data.length === 0) continue;
    const joined = data.join('\n');
    try {
      events.push({ event, data: JSON.parse(joined) });
    } catch {
      events.push({ event, data: joined });
    }
  }
  return events;
}

const costOf = (usage: any): bigint | undefined => (typeof usage?.cost === 'string' ? parseCredits(usage.cost) : undefined);

/**
 * The clients' connection pool: kept-alive connections as an SDK keeps them, each closed after a few
 * requests, so that new connections reach a restarted edge (a connection stays on the edge the balancer
 * gave it) and each edge has requests in flight when it is killed.
 */
export function clientAgent(): Agent {
  return new Agent({ maxRequestsPerClient: 8 });
}

/** Sends one request of `kind` through `baseUrl` and records its fate (never throws). */
export async function sendRequest(agent: Agent, baseUrl: string, apiKey: string, account: number, kind: RequestKind, tag: string): Promise<RequestRecord> {
  const { path, headers, body } = requestFor(kind, tag);
  const record: RequestRecord = { account, tag, kind, startAt: Date.now(), endAt: 0, outcome: 'cut' };
  const auth: Record<string, string> = kind === 'messages-stream' ? { 'x-api-key': apiKey } : { authorization: `Bearer ${apiKey}` };
  const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
  let response: Awaited<ReturnType<typeof clientFetch>>;
  try {
    response = await clientFetch(`${baseUrl}${path}`, {
      method: 'POST', headers: { ...auth, ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body), signal, dispatcher: agent,
    });
  } catch (error) {
    record.endAt = Date.now();
    record.outcome = signal.aborted ? 'timeout' : 'cut';
    record.detail = String((error as Error).cause ?? error);
    return record;
  }
  record.headersAt = Date.now();
  record.status = response.status;
  record.retryAfter = response.headers.get('retry-after');
  record.requestId = response.headers.get('x-request-id');
  let text: string;
  try {
    text = await response.text();
  } catch (error) {
    record.endAt = Date.now();
    record.outcome = signal.aborted ? 'timeout' : 'cut';
    record.detail = String((error as Error).cause ?? error);
    return record;
  }
  record.endAt = Date.now();
  if (response.status !== 200) {
    record.outcome = 'refused';
    record.body = text.slice(0, 500);
    try {
      const parsed = JSON.parse(text) as { error?: { code?: string; type?: string } };
      record.detail = parsed.error?.code ?? parsed.error?.type;
    } catch {
      // Not JSON: the body is kept for the report.
    }
    return record;
  }
  if (kind === 'chat' || kind === 'responses' || kind === 'embeddings') {
    try {
      record.costPico = costOf((JSON.parse(text) as { usage?: unknown }).usage);
    } catch {
      // A 200 whose body is not JSON is reported as cut below.
    }
    record.outcome = record.costPico === undefined ? 'cut' : 'answered';
    if (record.outcome === 'cut') record.body = text.slice(0, 500);
    return record;
  }
  const events = sseEvents(text);
  if (kind === 'chat-stream') {
    const failure = events.find((event) => typeof event.data === 'object' && event.data?.error);
    const usage = events.find((event) => typeof event.data === 'object' && event.data?.usage)?.data.usage;
    const done = events.some((event) => event.data === '[DONE]');
    if (failure) {
      record.outcome = 'stream-error';
      record.detail = failure.data.error.code ?? failure.data.error.type;
    } else if (done && costOf(usage) !== undefined) {
      record.outcome = 'answered';
      record.costPico = costOf(usage);
    }
  } else {
    const failure = events.find((event) => event.event === 'error');
    const delta = events.find((event) => event.event === 'message_delta');
    const stopped = events.some((event) => event.event === 'message_stop');
    if (failure) {
      record.outcome = 'stream-error';
      record.detail = failure.data?.error?.type;
    } else if (stopped && costOf(delta?.data?.usage) !== undefined) {
      record.outcome = 'answered';
      record.costPico = costOf(delta!.data.usage);
    }
  }
  if (record.outcome === 'cut') record.body = text.slice(-300);
  return record;
}

export type ReplicaKind = 'edge' | 'routing' | 'ledger';

export interface KillRecord {
  kind: ReplicaKind;
  index: number;
  signal: 'SIGKILL' | 'SIGTERM';
  at: number;
  exitedAt?: number;
  exitCode?: number | null;
  restartedAt?: number;
  healthyAt?: number;
  /** Requests the test had in flight through the balancer when the signal went (edges only). */
  inFlight?: number;
}

/** The kills that could have caused a failure seen at `at`: signalled at most `windowMs` before it. */
export function killsBefore(kills: KillRecord[], at: number, windowMs: number, filter: (kill: KillRecord) => boolean = () => true): KillRecord[] {
  return kills.filter((kill) => filter(kill) && kill.at <= at && at - kill.at <= windowMs);
}

/** Whether a child process has exited. */
export const exited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;
