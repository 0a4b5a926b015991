import { expect } from 'vitest';
import OpenAI from 'openai';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';
import { ctlJson, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';

// What the background-response e2e files share: a catalog of one paid text model behind one OpenAI-wire
// fake upstream (chat completions and responses), an account with a key and an `openai` client, the
// stack they run on (startBackgroundStack) and the wait for a run's end (settledResponse).

/** One model `model`, priced `priceIn`/`priceOut` a token, served by `upstream-one` at `upstreamUrl` (key in `keyEnv`). */
export function oneTextModelCatalog(options: { model: string; upstreamModel: string; upstreamUrl: string; keyEnv: string; priceIn: string; priceOut: string }): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: 'openai', url: options.upstreamUrl, keyEnv: options.keyEnv }],
    models: [{
      id: options.model,
      contextWindow: 8000,
      maxOutputTokens: 100,
      supportedParameters: ['temperature', 'max_completion_tokens'],
      pricing: tokenPricing(options.priceIn, options.priceOut),
      offers: [{ provider: 'upstream-one', upstreamModel: options.upstreamModel, endpoints: ['chat.completions', 'responses'] }],
    }],
  });
}

/** A new account with `credits`, a key of it, and an `openai` client on the stack with that key. */
export async function openAiAccount(stack: StackOnCatalog['stack'], name: string, credits: string): Promise<{ accountId: string; client: OpenAI }> {
  const created = await ctlJson(stack, 'accounts', 'create', '--name', name, '--credits', credits, '--tier', 'tier-1', '--json');
  const apiKey = (await ctlJson(stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
  return { accountId: created.account_id!, client: new OpenAI({ baseURL: `${stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }) };
}

/**
 * The in-process stack of a background-response e2e file: an OpenAI-wire fake upstream, the stack on
 * `catalog(upstream)` (startStackOnCatalog with `options`), a ledger client, and two accounts of 10
 * credits: `<accountPrefix>-main`, the one the tests use, and `<accountPrefix>-stranger`, to whom every
 * id of the first is unknown. A failed start closes what it had started.
 */
export interface BackgroundStack {
  upstream: FakeUpstream;
  base: StackOnCatalog;
  ledger: PromiseClient<LedgerServiceClient>;
  accountId: string;
  client: OpenAI;
  stranger: OpenAI;
  /** Another account with `credits`, a key of it and an `openai` client (openAiAccount). */
  account(name: string, credits: string): Promise<{ accountId: string; client: OpenAI }>;
  /** The account's settled balance, in picocredits. */
  balance(accountId: string): Promise<bigint>;
  /** How many requests of `model` the ledger charged the account for (its activity of the last 30 days). */
  charges(accountId: string, model: string): Promise<number>;
  /** Closes the ledger client, stops the stack, closes the fake upstream. */
  stop(): Promise<void>;
}

export async function startBackgroundStack(
  name: string,
  accountPrefix: string,
  catalog: (upstream: FakeUpstream) => string,
  options: Parameters<typeof startStackOnCatalog>[2],
): Promise<BackgroundStack> {
  const upstream = await startFakeUpstream();
  let base: StackOnCatalog;
  try {
    base = await startStackOnCatalog(name, catalog(upstream), options);
  } catch (error) {
    await upstream.close();
    throw error;
  }
  const ledger = createClient(LedgerServiceClient, LedgerServiceService, base.stack.addresses.ledger);
  const stop = async () => {
    ledger.close();
    await base.stop();
    await upstream.close();
  };
  try {
    const main = await openAiAccount(base.stack, `${accountPrefix}-main`, '10');
    const stranger = (await openAiAccount(base.stack, `${accountPrefix}-stranger`, '10')).client;
    return {
      upstream,
      base,
      ledger,
      accountId: main.accountId,
      client: main.client,
      stranger,
      account: (accountName, credits) => openAiAccount(base.stack, accountName, credits),
      balance: async (accountId) => parseCredits((await ledger.getBalance({ accountId })).balance),
      async charges(accountId, model) {
        const activity = await ledger.getActivity({ accountId, days: 30, keyId: '' });
        return activity.rows.filter((row) => row.modelId === model).reduce((sum, row) => sum + row.requests, 0);
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Response `id` as `client` reads it once its run has ended (neither queued nor in progress any more). */
export async function settledResponse(client: OpenAI, id: string): Promise<OpenAI.Responses.Response> {
  let seen: OpenAI.Responses.Response | undefined;
  await eventually(async () => {
    seen = await client.responses.retrieve(id);
    expect(['queued', 'in_progress']).not.toContain(seen.status);
  }, 30_000, 100);
  return seen!;
}
