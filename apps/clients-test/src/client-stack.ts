import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  createTestBus, createTestDatabase, eventually, natsUrl, npmStartBanner, startFakeAnthropicUpstream, startFakeUpstream, startNpmStart,
  TEST_ADMIN_TOKEN, testInternalAuthEnv,
  type FakeAnthropicUpstream, type FakeUpstream, type NpmStart, type RecordedRequest, type TestBus, type TestDatabase,
} from '@gateway/testing';

/*
 * What every real-client test stands on: the gateway as `npm start` runs it, a child process
 * (`node apps/standalone/dist/main.js`, so the built dist) on a fresh test database and NATS namespace,
 * both fake upstreams (OpenAI-compatible chat completions and the Anthropic Messages API) behind one model
 * each, the dev account it creates on first start (10 credits, tier-1, an API key and a provisioning key,
 * read from its banner), and the money view (balance route and the ledger's activity rows) for
 * exact-charge checks. No app is imported: the gateway is driven from outside, as a user's client drives it.
 */

/** Catalog prices of both models, per token, as decimal credits. */
export const INPUT_PRICE = '0.000001';
export const OUTPUT_PRICE = '0.000002';
/** What `npm start` gives the dev account it creates (apps/standalone/src/dev-account.ts). */
export const STARTING_CREDITS = '10';
/** Served by the Anthropic-wire fake. */
export const ANTHROPIC_MODEL = 'testco/claude-agent';
/** Served by the OpenAI-compatible fake. */
export const OPENAI_MODEL = 'testco/gpt-agent';

const PROVIDER_KEY_ENV = 'CLIENTS_TEST_PROVIDER_KEY';
/** The catalog model each fake's upstream model name serves. */
const UPSTREAM_MODELS: Record<string, string> = { 'claude-upstream': ANTHROPIC_MODEL, 'gpt-upstream': OPENAI_MODEL };

function catalogYaml(openai: FakeUpstream, anthropic: FakeAnthropicUpstream): string {
  const model = (id: string, provider: string, upstreamModel: string) => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    context_window: 200000
    max_output_tokens: 64000
    input_modalities: [text, image]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, temperature, top_p, max_completion_tokens, stream_options, reasoning, parallel_tool_calls, stop]
    pricing: { per_input_token: "${INPUT_PRICE}", per_output_token: "${OUTPUT_PRICE}" }
    limit_group: default
    offers:
      - { provider: ${provider}, upstream_model: ${upstreamModel}, endpoints: [chat.completions, messages, responses] }`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: fake-openai, kind: openai, base_url: ${openai.url}, api_key_env: ${PROVIDER_KEY_ENV} }
  - { id: fake-anthropic, kind: anthropic, base_url: ${anthropic.url}, api_key_env: ${PROVIDER_KEY_ENV} }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:${model(ANTHROPIC_MODEL, 'fake-anthropic', 'claude-upstream')}${model(OPENAI_MODEL, 'fake-openai', 'gpt-upstream')}
`;
}

/** Usage as both fakes take it (OpenAI's counters; the Anthropic fake maps them to its own). */
export interface ReportedUsage {
  prompt_tokens: number;
  completion_tokens: number;
}

export interface ClientStack {
  /** The `npm start` process. */
  gateway: NpmStart;
  /** The gateway's root URL (no `/v1`). */
  url: string;
  apiKey: string;
  accountId: string;
  openai: FakeUpstream;
  anthropic: FakeAnthropicUpstream;
  /** Every usage a fake reported in an answer it gave (see `reported`), in order, with the model it answered for. */
  reportedUsage: Array<ReportedUsage & { modelId: string }>;
  /**
   * Usage for an answer to `request` (distinct per request so a wrong sum shows), recorded in
   * `reportedUsage`: a script calls it for each answer it gives.
   */
  reported(request: RecordedRequest): ReportedUsage;
  /** Balance in decimal credits as the account route shows it. */
  balance(): Promise<string>;
  /** The ledger's activity rows of a model for this account: requests and cost. */
  charges(modelId: string): Promise<{ requests: number; costPico: bigint }>;
  /**
   * Waits until the ledger shows, for each model, exactly one charge per answer a fake reported for it,
   * their sum priced at the catalog's prices for the fake's usage, and the balance is the starting
   * credits minus the price of everything reported so far.
   */
  expectChargedExactly(): Promise<void>;
  stop(): Promise<void>;
}

/** Priced usage in pico-credits. */
export function priced(usage: readonly ReportedUsage[]): bigint {
  return usage.reduce(
    (sum, one) => sum + BigInt(one.prompt_tokens) * parseCredits(INPUT_PRICE) + BigInt(one.completion_tokens) * parseCredits(OUTPUT_PRICE),
    0n,
  );
}

/** Admission as the stack e2e suite runs it: GATEWAY_TEST_ADMISSION, default leased (the product default). */
function admission(): 'ledger' | 'leased' {
  const value = process.env.GATEWAY_TEST_ADMISSION ?? 'leased';
  if (value !== 'ledger' && value !== 'leased') throw new Error(`GATEWAY_TEST_ADMISSION must be ledger or leased: ${value}`);
  return value;
}

export async function startClientStack(name: string): Promise<ClientStack> {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    cleanups.length = 0;
  };
  try {
    const openai = await startFakeUpstream();
    cleanups.push(() => openai.close());
    const anthropic = await startFakeAnthropicUpstream();
    cleanups.push(() => anthropic.close());
    const directory = await mkdtemp(join(tmpdir(), `gateway-clients-${name}-`));
    cleanups.push(() => rm(directory, { recursive: true, force: true }));
    const database: TestDatabase = await createTestDatabase();
    cleanups.push(() => database.drop());
    const testBus: TestBus = await createTestBus('nats');
    cleanups.push(() => testBus.destroy());
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, catalogYaml(openai, anthropic));
    const gateway = startNpmStart({
      GATEWAY_DATA_DIR: join(directory, 'data'),
      GATEWAY_CONFIG: configPath,
      DATABASE_URL: database.url,
      NATS_URL: natsUrl,
      NATS_NAMESPACE: testBus.namespace,
      KEY_HASH_SECRET: 'clients-test-secret-0123456789-abcdef',
      EDGE_ADMISSION: admission(),
      [PROVIDER_KEY_ENV]: 'sk-upstream-fake',
      ...testInternalAuthEnv,
    });
    cleanups.push(async () => {
      if (gateway.child.exitCode === null && gateway.child.signalCode === null) gateway.child.kill('SIGTERM');
      const stopped = await Promise.race([gateway.exited.then(() => true), new Promise<boolean>((resolve) => setTimeout(resolve, 20_000, false))]);
      if (!stopped) {
        gateway.child.kill('SIGKILL');
        await gateway.exited;
      }
    });
    // The dev account npm start creates on a fresh database: STARTING_CREDITS at tier-1.
    const banner = await npmStartBanner(gateway);
    const { url, apiKey, accountId, provisioningKey } = banner;
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, banner.ledgerAddress, { credential: TEST_ADMIN_TOKEN });
    cleanups.push(() => ledger.close());

    const reportedUsage: ClientStack['reportedUsage'] = [];
    const balance = async () => {
      const response = await fetch(`${url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
      if (response.status !== 200) throw new Error(`balance: ${response.status} ${await response.text()}`);
      return ((await response.json()) as { balance: string }).balance;
    };
    const charges = async (modelId: string) => {
      const activity = await ledger.getActivity({ accountId, days: 30, keyId: '' });
      const rows = activity.rows.filter((row) => row.modelId === modelId);
      return {
        requests: rows.reduce((sum, row) => sum + row.requests, 0),
        costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n),
      };
    };
    return {
      gateway,
      url,
      apiKey,
      accountId,
      openai,
      anthropic,
      reportedUsage,
      reported(request) {
        const upstreamModel = String(request.body?.model ?? '');
        const modelId = UPSTREAM_MODELS[upstreamModel];
        if (!modelId) throw new Error(`a fake answered for an unknown upstream model ${upstreamModel}`);
        const count = reportedUsage.length;
        const usage = { prompt_tokens: 300 + 17 * count, completion_tokens: 11 + 5 * count };
        reportedUsage.push({ ...usage, modelId });
        return usage;
      },
      balance,
      charges,
      async expectChargedExactly() {
        const expected = [ANTHROPIC_MODEL, OPENAI_MODEL].map((modelId) => {
          const usage = reportedUsage.filter((one) => one.modelId === modelId);
          return { modelId, requests: usage.length, costPico: priced(usage) };
        });
        const expectedBalance = parseCredits(STARTING_CREDITS) - priced(reportedUsage);
        let seen: unknown[] = [];
        let seenBalance = '';
        try {
          await eventually(async () => {
            seen = await Promise.all(expected.map(async ({ modelId }) => ({ modelId, ...(await charges(modelId)) })));
            seenBalance = await balance();
            for (const [index, want] of expected.entries()) {
              const got = seen[index] as typeof want;
              if (got.requests !== want.requests || got.costPico !== want.costPico) throw new Error('not yet');
            }
            if (parseCredits(seenBalance) !== expectedBalance) throw new Error('not yet');
          }, 20_000, 100);
        } catch {
          const show = (value: unknown) => JSON.stringify(value, (_key, item) => (typeof item === 'bigint' ? item.toString() : item));
          throw new Error(
            `charges: expected ${show(expected)} and balance ${expectedBalance} pico, saw ${show(seen)} and balance ${seenBalance}; ` +
            `usage reported: ${show(reportedUsage)}`,
          );
        }
      },
      stop,
    };
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
}
