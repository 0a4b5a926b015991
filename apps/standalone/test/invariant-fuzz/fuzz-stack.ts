import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import WebSocket from 'ws';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { AuthServiceClient, AuthServiceService, LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  startFakeAnthropicUpstream, startFakeGeminiUpstream, startFakeUpstream, startOidcIssuer, testLogger, type FakeBehaviour, type FakeGeminiBehaviour, type FakeGeminiUpstream,
  type FakeUpstream, type RecordedRequest, type TestOidcIssuer,
} from '@gateway/testing';
import { startEdgeReplica, type RunningEdge } from '../../src/index.js';
import { testAdmission } from '../admission-mode.js';
import { startStackOnCatalog, type StackOnCatalog } from '../configured-stack.js';
import { openSharedLearnedMap } from '../learned-map.js';
import { gatewayctl } from '../stack-harness.js';

// Issue 35: the ledger's invariants, written down once (checkSequence) and checked after every generated
// sequence of requests (see invariant-fuzz.ts for the generators and the property). This file is the
// stack under test: the npm-start composition (every service in-process) on a test database of the
// machine's Postgres and a NATS namespace, four fake upstreams (two OpenAI-compatible, one Anthropic, one
// Gemini) whose behaviour each request's plan decides, and a catalog with a free model and paid ones.

/** Providers of the catalog, by the fake that serves them. */
export type ProviderId = 'oa' | 'oa2' | 'an' | 'gm';
export const PROVIDERS: readonly ProviderId[] = ['oa', 'oa2', 'an', 'gm'];

/** The fakes, by provider. */
export interface FuzzFakes {
  oa: FakeUpstream;
  oa2: FakeUpstream;
  an: FakeUpstream;
  gm: FakeGeminiUpstream;
}

export interface ModelPrices {
  input: bigint;
  cachedInput: bigint;
  output: bigint;
}

/** The catalog's models: prices in pico-credits per token, and which providers offer each. */
export const MODELS = {
  'fz/free': { prices: { input: 0n, cachedInput: 0n, output: 0n }, providers: ['oa', 'an'] as ProviderId[] },
  // Gemini answers `n` as candidateCount (not streamed): several choices on the paid models go to an OpenAI fake or gm.
  'fz/cheap': { prices: { input: parseCredits('0.000001'), cachedInput: parseCredits('0.0000005'), output: parseCredits('0.000002') }, providers: ['oa', 'an', 'gm'] as ProviderId[] },
  'fz/dear': { prices: { input: parseCredits('0.0002'), cachedInput: parseCredits('0.0001'), output: parseCredits('0.0005') }, providers: ['oa2', 'an', 'gm'] as ProviderId[] },
} as const;
export type ModelId = keyof typeof MODELS;

/**
 * Batch prices (docs/jobs.md "Batch prices"): each price given replaces the regular one, a price not given
 * stays regular (fz/cheap's cached input). fz/free has none: its batch lines stay free.
 */
export const BATCH_PRICES: Partial<Record<string, Partial<ModelPrices>>> = {
  'fz/cheap': { input: parseCredits('0.0000005'), output: parseCredits('0.000001') },
  'fz/dear': { input: parseCredits('0.0001'), cachedInput: parseCredits('0.00005'), output: parseCredits('0.00025') },
  'fz/embed': { input: parseCredits('0.0000005') },
};
/** The embeddings model batches of /v1/embeddings lines use (not in MODELS: the interactive generators never pick it). */
export const EMBED_MODEL = 'fz/embed';
const EMBED_PRICES: ModelPrices = { input: parseCredits('0.000001'), cachedInput: 0n, output: 0n };

/** A model's prices, regular or for a batch line (a charge whose request id is a batch line's). */
export function pricesOf(model: string, batch: boolean): ModelPrices | undefined {
  const regular = model === EMBED_MODEL ? EMBED_PRICES : MODELS[model as ModelId]?.prices;
  if (!regular || !batch) return regular;
  return { ...regular, ...BATCH_PRICES[model] };
}
export const MODEL_IDS = Object.keys(MODELS) as ModelId[];

/** A charge's price: (input − cached) × input + cached × cached input + output × output, regular or batch prices. */
export function priceOf(model: string, input: bigint, cached: bigint, output: bigint, batch = false): bigint {
  const prices = pricesOf(model, batch);
  if (!prices) throw new Error(`charge for a model not in the catalog: ${model}`);
  return (input - cached) * prices.input + cached * prices.cachedInput + output * prices.output;
}

/** Background responses one account may have queued or running at once (background-fuzz.ts meets the 429 past it). */
export const BACKGROUND_CAP = 3;
export const isPaid = (model: string): boolean => {
  const prices = MODELS[model as ModelId]?.prices;
  return prices === undefined || prices.input > 0n || prices.output > 0n;
};

const credits = (pico: bigint) => {
  const whole = pico / 1_000_000_000_000n;
  const fraction = (pico % 1_000_000_000_000n).toString().padStart(12, '0').replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : `${whole}`;
};

function catalogYaml(fakes: FuzzFakes): string {
  const model = (id: ModelId) => {
    const { prices, providers } = MODELS[id];
    return `
  - id: ${id}
    owned_by: fz
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    context_window: 8000
    max_output_tokens: 1000
    supported_parameters: [temperature, top_p, max_completion_tokens, max_tokens, stream_options, n]
    pricing: { per_input_token: "${credits(prices.input)}", per_cached_input_token: "${credits(prices.cachedInput)}", per_output_token: "${credits(prices.output)}" }
    limit_group: main${BATCH_PRICES[id] ? `
    batch_pricing: { ${Object.entries(BATCH_PRICES[id]!).map(([kind, pico]) => `${{ input: 'per_input_token', cachedInput: 'per_cached_input_token', output: 'per_output_token' }[kind]}: "${credits(pico)}"`).join(', ')} }` : ''}
    offers:${providers.map((provider) => `
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-at-${provider}, endpoints: [chat.completions, messages, responses] }`).join('')}`;
  };
  return `
startups:
  - { id: fz, display_name: Fuzz }
providers:
  - { id: oa, kind: openai, base_url: ${fakes.oa.url}, api_key_env: FUZZ_KEY }
  - { id: oa2, kind: openai, base_url: ${fakes.oa2.url}, api_key_env: FUZZ_KEY }
  - { id: an, kind: anthropic, base_url: ${fakes.an.url}, api_key_env: FUZZ_KEY }
  - { id: gm, kind: gemini, base_url: ${fakes.gm.url}, api_key_env: FUZZ_KEY }
limit_groups:
  - id: main
    tiers: { tier-1: { minute: 10000 }, free: { minute: 4 } }
models:${MODEL_IDS.map(model).join('')}
  - id: ${EMBED_MODEL}
    owned_by: fz
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    context_window: 8000
    supported_parameters: []
    pricing: { per_input_token: "${credits(EMBED_PRICES.input)}" }
    batch_pricing: { per_input_token: "${credits(BATCH_PRICES[EMBED_MODEL]!.input!)}" }
    limit_group: main
    offers:
      - { provider: oa, upstream_model: embed-at-oa, endpoints: [embeddings] }
      - { provider: oa2, upstream_model: embed-at-oa2, endpoints: [embeddings] }
`;
}

/**
 * The provider a fake upstream's model name belongs to (`cheap-at-oa` → fz/cheap on oa): in the body, or
 * in the path for Gemini (`/v1beta/models/cheap-at-gm:generateContent`).
 */
export function upstreamModelOf(request: Pick<RecordedRequest, 'body' | 'path'>): { model: ModelId; provider: ProviderId } | undefined {
  const body = request.body as { model?: unknown } | undefined;
  const name = body?.model ?? /\/models\/([^/:]+):/.exec(request.path)?.[1];
  const match = /^(\w+)-at-(\w+)$/.exec(String(name ?? ''));
  return match ? { model: `fz/${match[1]}` as ModelId, provider: match[2] as ProviderId } : undefined;
}

/** Finds the request's tag (`fz…` word in its prompt) in whatever shape the dialect sent it upstream. */
export function tagOf(body: unknown): string | undefined {
  return /\b(fz\d+[a-z][\w-]*)\b/.exec(JSON.stringify(body ?? ''))?.[1];
}

export interface FuzzStack {
  base: StackOnCatalog;
  url: string;
  fakes: FuzzFakes;
  db: pg.Pool;
  /** Behaviours per request tag: the n-th attempt that reaches any fake takes the n-th (the last repeats). */
  plans: Map<string, { attempts: FakeBehaviour[]; used: number; usage?: unknown }>;
  ctl(...argv: string[]): Promise<Record<string, string>>;
  /**
   * An account with its provisioning key and `credits`, made over the services' gRPC API with the calls
   * `gatewayctl accounts create` makes (Auth.CreateAccount, then Ledger.TopUp keyed by the account): the
   * fuzzer makes several per sequence, and a CLI process each (~1–2 s to start on this machine) would
   * take most of its time budget.
   */
  createAccount(name: string, credits: string, tier: string): Promise<{ accountId: string; provisioningKey: string }>;
  /**
   * Empties routing's learned capability map (through its shared bucket, as an operator would): what
   * one sequence taught it must not decide the next, or a failure would hang on every later run and
   * shrink to nothing.
   */
  forgetLearned(): Promise<void>;
  /** The webhook receiver every budgeted account registers (docs/governance.md "Webhooks"), and what it got. */
  webhooks: { url: string; received: Array<{ headers: IncomingHttpHeaders; body: string }> };
  /**
   * Sign-in (governance-fuzz.ts): a second edge on the same services that signs people in with an
   * in-process OpenID provider; members are added per run (by issuer and subject) and act through it.
   */
  signIn: { url: string; issuer: TestOidcIssuer };
  stop(): Promise<void>;
}

export async function startFuzzStack(): Promise<FuzzStack> {
  const [oa, oa2, an, gm] = await Promise.all([startFakeUpstream(), startFakeUpstream(), startFakeAnthropicUpstream(), startFakeGeminiUpstream()]);
  const fakes: FuzzFakes = { oa, oa2, an, gm };
  const plans: FuzzStack['plans'] = new Map();
  // Each fake answers by the request's plan, found from the tag in its prompt, so concurrent requests
  // each get their own generated behaviour whatever order they arrive in.
  const answer = (request: RecordedRequest): FakeBehaviour => {
    const tag = tagOf(request.body);
    const plan = tag === undefined ? undefined : plans.get(tag);
    if (!plan || plan.attempts.length === 0) return {};
    const behaviour = plan.attempts[Math.min(plan.used, plan.attempts.length - 1)]!;
    plan.used++;
    return behaviour;
  };
  for (const fake of [oa, oa2, an]) fake.setFallback(answer);
  gm.setFallback((request) => geminiBehaviour(answer(request)));
  let base: StackOnCatalog;
  try {
    base = await startStackOnCatalog('fuzz', catalogYaml(fakes), {
      keyHashSecret: 'invariant-fuzz-secret-0123456789-abcdef',
      providerSecrets: { FUZZ_KEY: 'sk-fuzz' },
      // Batches (batch-fuzz.ts): the runner looks for work often, so a sequence's batches end within its run.
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 5_000 } }, background: { maxActivePerAccount: BACKGROUND_CAP } },
      // The webhook receiver is on loopback.
      ledger: { webhooks: { allowPrivate: true, intervalMs: 50, baseBackoffMs: 100, maxBackoffMs: 400 } },
      // Key events (account-events.ts): relayed and expiries swept quickly, so a run's events arrive within its check.
      auth: { events: { relayIntervalMs: 100, expirySweepIntervalMs: 200 } },
    });
  } catch (error) {
    await Promise.all(Object.values(fakes).map((fake) => fake.close()));
    throw error;
  }
  const received: FuzzStack['webhooks']['received'] = [];
  const receiver = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString('utf8') });
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const webhooks = { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/fuzz-hooks`, received };
  const signInPort = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const signInUrl = `http://127.0.0.1:${signInPort}`;
  const issuer = await startOidcIssuer({ redirectUri: `${signInUrl}/v1/auth/callback` });
  const signedInEdge: RunningEdge = await startEdgeReplica(base.stack.addresses, {
    port: signInPort,
    bus: await base.testBus.connectAnother(),
    logger: testLogger('fuzz-sign-in-edge'),
    admission: testAdmission,
    signIn: {
      issuer: issuer.issuer, clientId: issuer.client.clientId, clientSecret: issuer.client.clientSecret,
      redirectUri: `${signInUrl}/v1/auth/callback`, secureCookies: false, memberships: [], operatorGroups: [],
    },
  });
  const db = new pg.Pool({ connectionString: base.database.url, max: 2 });
  const learned = await openSharedLearnedMap(base.testBus.bus);
  const auth: PromiseClient<AuthServiceClient> = createClient(AuthServiceClient, AuthServiceService, base.stack.addresses.auth);
  const ledger: PromiseClient<LedgerServiceClient> = createClient(LedgerServiceClient, LedgerServiceService, base.stack.addresses.ledger);
  return {
    base,
    url: base.stack.url,
    fakes,
    db,
    plans,
    webhooks,
    signIn: { url: signInUrl, issuer },
    ctl: async (...argv) => {
      const result = await gatewayctl(base.stack, ...argv);
      if (result.code !== 0) throw new Error(`gatewayctl ${argv.join(' ')}: ${result.stderr}`);
      return JSON.parse(result.stdout) as Record<string, string>;
    },
    createAccount: async (name, credits, tier) => {
      const created = await auth.createAccount({ name, tier, idempotencyKey: `fuzz-account-${randomUUID()}` });
      const accountId = created.account?.id;
      if (!accountId) throw new Error('auth answered CreateAccount without an account');
      if (parseCredits(credits) > 0n) {
        await ledger.topUp({ accountId, credits, idempotencyKey: `account-create:${accountId}`, note: 'initial credits (invariant fuzzer)' });
      }
      return { accountId, provisioningKey: created.provisioningKey };
    },
    forgetLearned: async () => {
      await learned.clear();
      // Routing's replica takes the emptied map from the bucket's watch.
      await new Promise((resolve) => setTimeout(resolve, 150));
    },
    stop: async () => {
      auth.close();
      ledger.close();
      await db.end();
      await signedInEdge.stop();
      await issuer.stop();
      await base.stop();
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
      await Promise.all(Object.values(fakes).map((fake) => fake.close()));
    },
  };
}

const GEMINI_REFUSALS: Record<string, string> = {
  // The JSON decoder's refusal of a field (routing learns it and retries without top_p).
  top_p: 'Invalid JSON payload received. Unknown name "topP" at \'generation_config\': Cannot find field.',
  // Gemini has no value refusal of its own: a plain 400 the client gets.
  temperature: '* GenerateContentRequest.generation_config.temperature: temperature must be in the range [0.0, 2.0].',
};

/**
 * A plan's behaviour (written for the OpenAI-shaped fakes) as the Gemini fake's: usage in Gemini's
 * counters (candidatesTokenCount without the thoughts, which come as thoughtsTokenCount), a refusal
 * in Google's words.
 */
function geminiBehaviour(behaviour: FakeBehaviour): FakeGeminiBehaviour {
  const { usage, errorBody, toolCalls: _toolCalls, finishReason: _finishReason, ...shared } = behaviour;
  const gemini: FakeGeminiBehaviour = { ...shared };
  if (usage === 'absent') gemini.usage = 'absent';
  else if (usage) {
    const reasoning = usage.reasoning_tokens ?? 0;
    gemini.usage = {
      promptTokenCount: usage.prompt_tokens, candidatesTokenCount: Math.max(0, usage.completion_tokens - reasoning),
      ...(reasoning > 0 ? { thoughtsTokenCount: reasoning } : {}), ...(usage.cached_tokens ? { cachedContentTokenCount: usage.cached_tokens } : {}),
    };
  }
  const param = (errorBody as { error?: { param?: string } } | undefined)?.error?.param;
  if (param !== undefined && GEMINI_REFUSALS[param]) gemini.errorBody = { error: { code: 400, message: GEMINI_REFUSALS[param], status: 'INVALID_ARGUMENT' } };
  return gemini;
}

export interface FuzzAccount {
  accountId: string;
  provisioningKey: string;
  apiKey: string;
  keyId: string;
  initialPico: bigint;
  creditLimitPico: bigint | undefined;
  /** The budget set on the account or its key (docs/governance.md), if any. */
  budget: FuzzBudget | undefined;
  /** The signing secret of the account's webhook endpoint (registered with a budget), if any. */
  webhookSecret: string | undefined;
}

export interface FuzzBudget {
  scope: 'account' | 'key';
  period: 'weekly' | 'monthly';
  limit: string;
  thresholds: number[];
  hardStop: boolean;
}

/** A fresh account (its balance and tier) with one API key (its credit limit), as a customer makes them. */
export async function newAccount(fuzz: FuzzStack, name: string, balance: string, tier: string, creditLimit: string | null, budget?: FuzzBudget | null): Promise<FuzzAccount> {
  const { accountId, provisioningKey } = await fuzz.createAccount(name, balance, tier);
  const response = await fetch(`${fuzz.url}/v1/account/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' },
    // credit_limit is a JSON number on this route; the literal is written as is, never through a double.
    body: `{"name":"${name}-key","credit_limit":${creditLimit ?? 'null'}}`,
  });
  const text = await response.text();
  if (response.status !== 201) throw new Error(`key create ${response.status}: ${text}`);
  const key = JSON.parse(text) as { id: string; key: string };
  let webhookSecret: string | undefined;
  if (budget) {
    const path = budget.scope === 'account' ? '/v1/account/budgets/account' : `/v1/account/budgets/keys/${key.id}`;
    const set = await fetch(`${fuzz.url}${path}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ period: budget.period, limit: budget.limit, thresholds: budget.thresholds, hard_stop: budget.hardStop }),
    });
    if (set.status !== 200) throw new Error(`budget set ${set.status}: ${await set.text()}`);
    const hook = await fetch(`${fuzz.url}/v1/account/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: fuzz.webhooks.url, event_types: ['budget.threshold_crossed'] }),
    });
    const hookText = await hook.text();
    if (hook.status !== 201) throw new Error(`webhook create ${hook.status}: ${hookText}`);
    webhookSecret = (JSON.parse(hookText) as { secret: string }).secret;
  }
  return {
    accountId, provisioningKey, apiKey: key.key, keyId: key.id,
    initialPico: parseCredits(balance), creditLimitPico: creditLimit === null ? undefined : parseCredits(creditLimit),
    budget: budget ?? undefined,
    webhookSecret,
  };
}

export { randomUUID, WebSocket };
