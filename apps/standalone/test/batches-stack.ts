import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { ctlJson, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { batchCatalog, COMPLETION_TOKENS, PROMPT_TOKENS } from './batches-harness.js';

// The in-process stack of the batch e2e tests (OpenAI Batch, Anthropic Message Batches): the fake upstream
// answering every line with the harness's usage, the batch catalog on it, a quick batch runner (polls every
// 100 ms, 3 s leases, 4 lines at once, 2 of one account), and a ledger client to read balances.

export interface BatchStack {
  upstream: FakeUpstream;
  base: StackOnCatalog;
  ledger: PromiseClient<LedgerServiceClient>;
  /** A new account holding `credits`, and an API key of it. */
  account(name: string, credits: string): Promise<{ accountId: string; apiKey: string }>;
  balance(accountId: string): Promise<bigint>;
  stop(): Promise<void>;
}

/** `endpoints`: the batch model's offer's endpoints (batchCatalog's). */
export async function startBatchStack(name: string, keyHashSecret: string, endpoints?: string): Promise<BatchStack> {
  const upstream = await startFakeUpstream();
  upstream.setFallback({ usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
  let base: StackOnCatalog;
  try {
    base = await startStackOnCatalog(name, batchCatalog(upstream, endpoints), {
      keyHashSecret,
      providerSecrets: { BATCH_KEY: 'sk-batch' },
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000, concurrency: 4, perAccountConcurrency: 2 } } },
    });
  } catch (error) {
    await upstream.close();
    throw error;
  }
  const ledger = createClient(LedgerServiceClient, LedgerServiceService, base.stack.addresses.ledger);
  return {
    upstream,
    base,
    ledger,
    async account(accountName, credits) {
      const created = await ctlJson(base.stack, 'accounts', 'create', '--name', accountName, '--credits', credits, '--tier', 'tier-1', '--json');
      const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', `${accountName}-key`, '--json')).api_key!;
      return { accountId: created.account_id!, apiKey };
    },
    balance: async (accountId) => parseCredits((await ledger.getBalance({ accountId })).balance),
    async stop() {
      ledger.close();
      await base.stop();
      await upstream.close();
    },
  };
}
