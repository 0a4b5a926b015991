import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * Generation records (GET /v1/generation): one row per charge, written by the settlement statement in
 * the same transaction as the charge (settlement-batch.ts), so a record exists iff its charge does.
 * What the charge row already holds (account, key, model, provider, endpoint, usage counts, cost,
 * streamed, when) is read from it by a join; this row holds the rest: timings, finish reason,
 * cancellation, zero-completion insurance, the provider's own counts and the cost split by kind. Kept
 * 30 days (the sweeper deletes older rows by `created_at`, a bounded batch per pass); the charge itself
 * stays in the journal.
 */
export const generations: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table generations (
        request_id text primary key,
        finish_reason text not null default '',
        latency_ms integer not null default 0,
        generation_time_ms integer not null default 0,
        cancelled boolean not null default false,
        insured_reason text not null default '',
        cache_write_tokens bigint not null default 0,
        native_input_tokens bigint,
        native_output_tokens bigint,
        native_reasoning_tokens bigint,
        native_cached_input_tokens bigint,
        native_cache_write_tokens bigint,
        cost_input_pico bigint not null default 0,
        cost_output_pico bigint not null default 0,
        cost_cache_read_pico bigint not null default 0,
        cost_cache_write_pico bigint not null default 0,
        cost_reasoning_pico bigint not null default 0,
        created_at timestamptz not null default now()
      )`.execute(db);
    // BRIN: rows arrive in created_at order, so block ranges are tight; nearly free to keep up on the
    // settlement path (a btree here cost that path a second index insert per row), and enough for the
    // sweeper's bounded deletes of the oldest rows.
    await sql`create index generations_created on generations using brin (created_at)`.execute(db);
  },
};
