import OpenAI from 'openai';
import { expect } from 'vitest';
import { catalogYaml, tokenPricing, type CatalogProvider } from './catalog-yaml.js';
import { ctlJson, startStackOnCatalog } from './configured-stack.js';
import { createClient, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, type FakeBehaviour, type FakeScript, type FakeUpstream } from '@gateway/testing';
import type { RunningStack, StackOptions } from '../src/index.js';

/**
 * A whole stack on a test catalog (YAML written to a temp file), one funded account with an API key,
 * the real `openai` client, and the ledger's own view of charges for "exactly one charge" checks.
 */
export interface ChatHarness {
  stack: RunningStack;
  apiKey: string;
  accountId: string;
  client: OpenAI;
  /** Balance in credits as the account routes show it. */
  balance(): Promise<string>;
  /** Charges the ledger recorded for the model (all days, this account). */
  charges(modelId: string): Promise<{ requests: number; costPico: bigint }>;
  /** Waits until the model has `requests` charges, then returns the total. */
  chargesSettleAt(modelId: string, requests: number): Promise<{ requests: number; costPico: bigint }>;
  stop(): Promise<void>;
}

export interface ChatHarnessOptions {
  configYaml: string;
  providerSecrets?: Record<string, string>;
  routing?: StackOptions['routing'];
  media?: StackOptions['media'];
  edge?: StackOptions['edge'];
  credits?: string;
}

export async function startChatHarness(options: ChatHarnessOptions): Promise<ChatHarness> {
  const base = await startStackOnCatalog('chat', options.configYaml, {
    keyHashSecret: 'chat-e2e-secret-chat-e2e-secret-0123',
    providerSecrets: options.providerSecrets ?? {},
    ...(options.routing ? { routing: options.routing } : {}),
    ...(options.media ? { media: options.media } : {}),
    ...(options.edge ? { edge: options.edge } : {}),
  });
  const stack = base.stack;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>> | undefined;
  const stop = async () => {
    ledger?.close();
    await base.stop();
  };
  try {
    const running = stack;
    const ctl = (...argv: string[]) => ctlJson(running, ...argv);
    const account = await ctl('accounts', 'create', '--name', 'chat-e2e', '--credits', options.credits ?? '10', '--tier', 'tier-1', '--json');
    const accountId = account.account_id!;
    const provisioningKey = account.provisioning_key!;
    const apiKey = (await ctl('keys', 'create', accountId, '--name', 'chat-e2e-key', '--json')).api_key!;
    ledger = createClient(LedgerServiceClient, LedgerServiceService, running.addresses.ledger);
    const ledgerClient = ledger;
    const charges = async (modelId: string) => {
      const activity = await ledgerClient.getActivity({ accountId, days: 30, keyId: '' });
      const rows = activity.rows.filter((row) => row.modelId === modelId);
      return {
        requests: rows.reduce((sum, row) => sum + row.requests, 0),
        costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n),
      };
    };
    return {
      stack: running,
      apiKey,
      accountId,
      client: new OpenAI({ baseURL: `${running.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }),
      balance: async () => {
        const response = await fetch(`${running.url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
        expect(response.status).toBe(200);
        return ((await response.json()) as { balance: string }).balance;
      },
      charges,
      chargesSettleAt: async (modelId, requests) => {
        let seen = { requests: -1, costPico: 0n };
        await eventually(async () => {
          seen = await charges(modelId);
          expect(seen.requests).toBe(requests);
        }, 15_000);
        return seen;
      },
      stop,
    };
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
}

export { minimalPdf } from '@gateway/testing';

/** The end of a block that ran a harness in front of fake upstreams: the stack first, then each fake (any of them may not have started). */
export async function stopHarnessAndFakes(harness: ChatHarness | undefined, fakes: readonly (Pick<FakeUpstream, 'close'> | undefined)[]): Promise<void> {
  await harness?.stop();
  for (const fake of fakes) await fake?.close();
}

/** Before each test: the fakes forget their requests and queued behaviours, and answer `fallback` from then on when it is given. */
export function resetFakes(fakes: readonly Pick<FakeUpstream, 'reset'>[]): void;
export function resetFakes(fakes: readonly Pick<FakeUpstream, 'reset' | 'setFallback'>[], fallback: FakeScript): void;
export function resetFakes(fakes: readonly (Pick<FakeUpstream, 'reset'> & Partial<Pick<FakeUpstream, 'setFallback'>>)[], fallback?: FakeScript): void {
  for (const fake of fakes) {
    fake.reset();
    if (fallback !== undefined) fake.setFallback!(fallback);
  }
}

/**
 * The first attempt of the next request meets `fault`, whichever of `upstreams` the routing strategy asks
 * first; every later request, on any of them, is answered normally.
 */
export function failFirstAttempt(upstreams: readonly FakeUpstream[], fault: FakeBehaviour): void {
  let used = false;
  const behaviour = () => {
    if (used) return {};
    used = true;
    return fault;
  };
  for (const upstream of upstreams) upstream.setFallback(behaviour);
}

/** Credits (decimal string) minus pico credits, as the balance route prints it. */
export function pricedTokens(promptTokens: number, completionTokens: number, inputPrice: string, outputPrice: string): bigint {
  return BigInt(promptTokens) * parseCredits(inputPrice) + BigInt(completionTokens) * parseCredits(outputPrice);
}

/**
 * A catalog of one text model (owned by `testco`) served by one provider with id `upstream-one`: what most
 * dialect e2e files need. `provider` is that provider's kind and, over the network, its URL and key variable.
 */
export function oneModelCatalog(options: {
  model: string;
  provider: Omit<CatalogProvider, 'id'>;
  upstreamModel: string;
  supportedParameters: string[];
  endpoints: string[];
  inputPrice?: string;
  outputPrice?: string;
  perMinute?: number;
}): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', ...options.provider }],
    limitGroups: [{ id: 'default', tiers: `{ tier-1: { minute: ${options.perMinute ?? 600} } }` }],
    models: [{
      id: options.model,
      supportedParameters: options.supportedParameters,
      pricing: tokenPricing(options.inputPrice ?? '0.000001', options.outputPrice ?? '0.000002'),
      offers: [{ provider: 'upstream-one', upstreamModel: options.upstreamModel, endpoints: options.endpoints }],
    }],
  });
}

/** A harness whose one model is served by the built-in simulated provider (upstream model `sim-agent`): no fake upstream to run. */
export function startSimulatedHarness(options: Omit<Parameters<typeof oneModelCatalog>[0], 'provider' | 'upstreamModel'>): Promise<ChatHarness> {
  return startChatHarness({ configYaml: oneModelCatalog({ ...options, provider: { kind: 'simulated' }, upstreamModel: 'sim-agent' }) });
}

export interface MixedCatalogModel {
  id: string;
  /** YAML list, e.g. `[text, file]`. */
  modalities: string;
  provider: 'fake-openai' | 'simulated';
}

/**
 * A catalog whose chat models are served either by the OpenAI-compatible fake upstream (provider
 * `fake-openai`, secret from `apiKeyEnv`) or by the built-in simulated provider, all in limit group
 * `default` whose tier `tier-1` allows `perMinute` requests a minute.
 */
export function mixedProviderCatalog(upstream: FakeUpstream, options: { apiKeyEnv: string; perMinute: number; models: readonly MixedCatalogModel[] }): string {
  const models = options.models.map(({ id, modalities, provider }) => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: ${modalities}
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, response_format, temperature, max_completion_tokens, stream_options]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-upstream, endpoints: [chat.completions] }`).join('');
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: fake-openai, kind: openai, base_url: ${upstream.url}, api_key_env: ${options.apiKeyEnv} }
  - { id: simulated, kind: simulated }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: ${options.perMinute} } }
models:${models}
`;
}
