import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * Webhook secret rotation (issue 42, docs/governance.md "Webhooks"): the secret a rotation replaced and
 * until when deliveries are still signed with it too (`previous_secret_until`; null or past: only the
 * current secret). Both are null on an endpoint never rotated.
 */
export const webhookSecretRotation: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table webhook_endpoints add column previous_secret text, add column previous_secret_until timestamptz`.execute(db);
  },
};
