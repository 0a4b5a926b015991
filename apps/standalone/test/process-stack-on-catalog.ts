import OpenAI from 'openai';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { TEST_INTERNAL_TOKEN, type TestDatabase } from '@gateway/testing';
import { createAccountKey, startProcessStack, type ProcessStack } from './process-stack.js';
import { onScratchDatabase } from './scratch-stack.js';

// What the crash e2e files share: a process stack (each app its own OS process) on a fresh test database
// and NATS namespace, the catalog `configYaml` in a temp file, and a ledger client to check balances and
// the journal with. The counterpart of configured-stack.ts's startStackOnCatalog for in-process stacks.

export interface ProcessStackOnCatalog {
  stack: ProcessStack;
  database: TestDatabase;
  ledger: PromiseClient<LedgerServiceClient>;
  /** The account's settled balance, in picocredits. */
  balance(accountId: string): Promise<bigint>;
  /**
   * A new account with `credits` and a key (createAccountKey), an `openai` client on the edge with that key
   * (2 retries and a 60 s timeout unless `client` says otherwise), and the account's balance.
   */
  account(name: string, credits: string, client?: { maxRetries?: number; timeout?: number }): Promise<ProcessStackAccount>;
  /** Closes the ledger client, stops every process, drops the database and NATS namespace, removes the catalog file. */
  stop(): Promise<void>;
}

export interface ProcessStackAccount {
  accountId: string;
  client: OpenAI;
  balance(): Promise<bigint>;
}

export async function startProcessStackOnCatalog(
  name: string,
  configYaml: string,
  env: Parameters<typeof startProcessStack>[2] = {},
  options: Parameters<typeof startProcessStack>[3] = {},
): Promise<ProcessStackOnCatalog> {
  const scratch = await onScratchDatabase(name, configYaml, (database, testBus, configPath) =>
    startProcessStack(database, testBus, { ...env, catalog: { GATEWAY_CONFIG: configPath, ...env.catalog } }, options));
  const ledger = createClient(LedgerServiceClient, LedgerServiceService, scratch.stack.addresses.ledger, { credential: TEST_INTERNAL_TOKEN });
  const balance = async (accountId: string) => parseCredits((await ledger.getBalance({ accountId })).balance);
  return {
    stack: scratch.stack,
    database: scratch.database,
    ledger,
    balance,
    async account(name, credits, client = {}) {
      const { accountId, apiKey } = await createAccountKey(scratch.stack, name, credits);
      return {
        accountId,
        client: new OpenAI({ baseURL: `${scratch.stack.edgeUrl}/v1`, apiKey, maxRetries: client.maxRetries ?? 2, timeout: client.timeout ?? 60_000 }),
        balance: () => balance(accountId),
      };
    },
    stop: async () => {
      ledger.close();
      await scratch.stop();
    },
  };
}
