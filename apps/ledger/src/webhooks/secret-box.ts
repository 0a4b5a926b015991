import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/*
 * Webhook signing secrets at rest (docs/governance.md "Webhooks", docs/security.md): AES-256-GCM under the
 * operator's key (WEBHOOK_SECRET_KEY, 32 bytes in base64), with the endpoint's id as associated data, so a
 * sealed secret copied onto another endpoint's row does not open. Stored as `gcm1:<base64 iv|tag|ciphertext>`.
 * A row written before encryption holds the plaintext `whsec_…`: it still opens, and the ledger seals it at
 * start (sealLegacyWebhookSecrets).
 */

const PREFIX = 'gcm1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

export type WebhookSecretKey = { readonly key: Buffer };

/** The key from its base64 form; anything but exactly 32 bytes is refused. */
export function webhookSecretKey(base64: string): WebhookSecretKey {
  const trimmed = base64.trim();
  const key = Buffer.from(trimmed, 'base64');
  if (key.length !== 32 || !/^[A-Za-z0-9+/]+={0,2}$/.test(trimmed)) throw new Error('WEBHOOK_SECRET_KEY must be 32 bytes in base64 (openssl rand -base64 32)');
  return { key };
}

export const isSealed = (stored: string) => stored.startsWith(PREFIX);

export function sealWebhookSecret(box: WebhookSecretKey, endpointId: string, secret: string): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', box.key, iv);
  cipher.setAAD(Buffer.from(endpointId, 'utf8'));
  const sealed = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return `${PREFIX}${Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64')}`;
}

/** The secret of a stored value: sealed ones are opened (a wrong key or another row's value throws), a legacy plaintext one is as it is. */
export function openWebhookSecret(box: WebhookSecretKey, endpointId: string, stored: string): string {
  if (!isSealed(stored)) return stored;
  const raw = Buffer.from(stored.slice(PREFIX.length), 'base64');
  if (raw.length < IV_BYTES + TAG_BYTES) throw new Error('a stored webhook secret is truncated');
  const decipher = createDecipheriv('aes-256-gcm', box.key, raw.subarray(0, IV_BYTES));
  decipher.setAAD(Buffer.from(endpointId, 'utf8'));
  decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
}
