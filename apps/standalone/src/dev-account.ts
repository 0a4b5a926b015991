import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import {
  AuthServiceClient,
  AuthServiceService,
  LedgerServiceClient,
  LedgerServiceService,
} from '@gateway/proto';
import { createClient } from '@gateway/platform';

export interface DevKeys {
  account_id: string;
  provisioning_key: string;
  api_key: string;
}

/**
 * First start: a dev account with 10 credits, a provisioning key and an API key, written to
 * dev-keys.json. Later starts reuse the file when its keys still verify against this database.
 */
export async function ensureDevAccount(
  file: string,
  addresses: { auth: string; ledger: string },
  /** The admin credential (CreateAccount and TopUp are admin RPCs). */
  credential?: string,
): Promise<{ keys: DevKeys; created: boolean }> {
  const auth = createClient(AuthServiceClient, AuthServiceService, addresses.auth, { credential });
  const ledger = createClient(LedgerServiceClient, LedgerServiceService, addresses.ledger, { credential });
  try {
    if (existsSync(file)) {
      const saved = JSON.parse(readFileSync(file, 'utf8')) as DevKeys;
      const stillValid = await Promise.all([
        auth.verifyApiKey({ key: saved.api_key }),
        auth.verifyProvisioningKey({ key: saved.provisioning_key }),
      ]).then(() => true, () => false);
      if (stillValid) return { keys: saved, created: false };
    }
    const { account, provisioningKey } = await auth.createAccount({ name: 'dev', tier: 'tier-1', idempotencyKey: '' });
    if (!account) throw new Error('CreateAccount answered without an account');
    await ledger.topUp({ accountId: account.id, credits: '10', idempotencyKey: `dev-initial-${account.id}`, note: 'npm start dev account' });
    const { plaintext } = await auth.createApiKey({ accountId: account.id, name: 'dev', defaultRoutingStrategy: '' });
    const keys: DevKeys = { account_id: account.id, provisioning_key: provisioningKey, api_key: plaintext };
    writeFileSync(file, `${JSON.stringify(keys, null, 2)}\n`, { mode: 0o600 });
    return { keys, created: true };
  } finally {
    auth.close();
    ledger.close();
  }
}
