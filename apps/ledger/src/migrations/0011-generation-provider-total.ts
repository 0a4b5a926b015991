import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * The provider's own total of a generation (issue 35 item 6: Usage.provider_total_tokens — OpenAI
 * `total_tokens`, Gemini `totalTokenCount`, Bedrock `totalTokens`), kept beside the provider's other
 * counts for reconciliation with its bill; null when it reported none. Never priced. A nullable column
 * without a default: adding it rewrites no row.
 */
export const generationProviderTotal: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table generations add column native_total_tokens bigint`.execute(db);
  },
};
