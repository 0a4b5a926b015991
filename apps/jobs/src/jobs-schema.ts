import type { Migration } from 'kysely';
import { accountEventOutboxMigration, outboxInsertSql, sql, type Kysely } from '@gateway/platform/db';

/** The jobs service's own Postgres schema: files and their chunks, batches and their lines. */
export const JOBS_SCHEMA = 'jobs';

export interface FilesTable {
  id: string;
  account_id: string;
  filename: string;
  /** batch | user_data | batch_output; '' while uploading. */
  purpose: string;
  bytes: bigint;
  /** uploading | processed */
  status: string;
  created_at: Date;
  /** null: never expires. */
  expires_at: Date | null;
  /** An upload not completed by then is discarded by the sweeper. */
  upload_deadline: Date | null;
}

/** One stored piece of a file's bytes (the Postgres FileContentStore): at most 1 MiB at its byte offset. */
export interface FileChunksTable {
  file_id: string;
  offset_bytes: bigint;
  data: Buffer;
}

export interface BatchesTable {
  id: string;
  /** batch (OpenAI Batch, lines from an input file) | messages (Anthropic Message Batch, lines given at create). */
  kind: string;
  account_id: string;
  key_id: string;
  tier: string;
  endpoint: string;
  input_file_id: string;
  completion_window: string;
  /** validating | failed | in_progress | finalizing | completed | expired | cancelling | cancelled */
  status: string;
  metadata: Record<string, string>;
  errors: { code: string; message: string; param: string; line: number }[];
  model: string;
  total: number;
  completed: number;
  failed: number;
  cost_pico: bigint;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: Date;
  in_progress_at: Date | null;
  expires_at: Date;
  finalizing_at: Date | null;
  completed_at: Date | null;
  failed_at: Date | null;
  expired_at: Date | null;
  cancelling_at: Date | null;
  cancelled_at: Date | null;
  /** The replica validating or finalizing the batch, until lease_expires_at. */
  lease_owner: string | null;
  lease_expires_at: Date | null;
}

export interface BatchLinesTable {
  batch_id: string;
  /** 0-based line of the input file. */
  line_index: number;
  custom_id: string;
  /** The validated request body. */
  body: unknown;
  /** pending | done | skipped */
  status: string;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  attempts: number;
  /** The output or error file line (OpenAI's line format), once done. */
  result: unknown;
  is_error: boolean;
  cost_pico: bigint;
}

/** An event for the account's webhooks, relayed to the ledger (@gateway/platform/db account-event-outbox). */
export interface AccountEventOutboxTable {
  id: bigint;
  event_id: string;
  account_id: string;
  type: string;
  data: unknown;
  created_at: Date;
}

export interface JobsDatabase {
  files: FilesTable;
  file_chunks: FileChunksTable;
  batches: BatchesTable;
  batch_lines: BatchLinesTable;
  account_event_outbox: AccountEventOutboxTable;
}

/**
 * The batch.completed event's data (docs/governance.md "Webhooks") of the trigger's `new` batch: an OpenAI
 * batch's request_counts are its columns; a message batch's are counted from its lines as the Message
 * Batches API counts them (a line not run when the batch ended was canceled). Cost: what its lines were charged.
 */
const BATCH_EVENT_DATA = `jsonb_build_object(
  'batch_id', new.id,
  'kind', case when new.kind = 'messages' then 'messages' else 'openai' end,
  'status', case when new.kind = 'messages' then 'ended' else new.status end,
  'request_counts', case when new.kind = 'messages' then (
      select jsonb_build_object(
        'processing', 0,
        'succeeded', count(*) filter (where l.status = 'done' and not l.is_error),
        'errored', count(*) filter (where l.status = 'done' and l.is_error and coalesce(l.result->'error'->>'code', '') <> 'batch_expired'),
        'canceled', count(*) filter (where l.status <> 'done'),
        'expired', count(*) filter (where l.status = 'done' and l.is_error and l.result->'error'->>'code' = 'batch_expired'))
      from jobs.batch_lines l where l.batch_id = new.id)
    else jsonb_build_object('total', new.total, 'completed', new.completed, 'failed', new.failed) end,
  'cost', trim_scale(new.cost_pico::numeric / 1000000000000)::text,
  'ended_at', to_jsonb(coalesce(new.completed_at, new.failed_at, new.expired_at, new.cancelled_at, now())))`;

/**
 * Migrations of the files and batches (named `jobs-*`). Stored responses live in the same schema with
 * migrations of their own (`responses-*`); the runner applies both groups unordered (each group is
 * independent of the other).
 */
export const JOBS_MIGRATIONS: Record<string, Migration> = {
  'jobs-0001_files': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table files (
          id text primary key,
          account_id text not null,
          filename text not null,
          purpose text not null default '',
          bytes bigint not null default 0,
          status text not null,
          created_at timestamptz not null default now(),
          expires_at timestamptz,
          upload_deadline timestamptz
        )`.execute(db);
      // Listing: an account's files newest first (id breaks ties of one instant).
      await sql`create index files_account_created on files (account_id, created_at desc, id desc)`.execute(db);
      await sql`create index files_expires_at on files (expires_at) where expires_at is not null`.execute(db);
      await sql`create index files_upload_deadline on files (upload_deadline) where upload_deadline is not null`.execute(db);
      await sql`
        create table file_chunks (
          file_id text not null references files (id) on delete cascade,
          offset_bytes bigint not null,
          data bytea not null,
          primary key (file_id, offset_bytes)
        )`.execute(db);
    },
  },
  'jobs-0002_batches': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table batches (
          id text primary key,
          account_id text not null,
          key_id text not null,
          tier text not null,
          endpoint text not null,
          input_file_id text not null,
          completion_window text not null,
          status text not null,
          metadata jsonb not null default '{}',
          errors jsonb not null default '[]',
          model text not null default '',
          total integer not null default 0,
          completed integer not null default 0,
          failed integer not null default 0,
          cost_pico bigint not null default 0,
          output_file_id text,
          error_file_id text,
          created_at timestamptz not null default now(),
          in_progress_at timestamptz,
          expires_at timestamptz not null,
          finalizing_at timestamptz,
          completed_at timestamptz,
          failed_at timestamptz,
          expired_at timestamptz,
          cancelling_at timestamptz,
          cancelled_at timestamptz,
          lease_owner text,
          lease_expires_at timestamptz
        )`.execute(db);
      await sql`create index batches_account_created on batches (account_id, created_at desc, id desc)`.execute(db);
      await sql`create index batches_unfinished on batches (created_at) where status in ('validating', 'in_progress', 'finalizing', 'cancelling')`.execute(db);
      await sql`
        create table batch_lines (
          batch_id text not null references batches (id) on delete cascade,
          line_index integer not null,
          custom_id text not null,
          body jsonb not null,
          status text not null,
          lease_owner text,
          lease_expires_at timestamptz,
          attempts integer not null default 0,
          result jsonb,
          is_error boolean not null default false,
          cost_pico bigint not null default 0,
          primary key (batch_id, line_index)
        )`.execute(db);
      await sql`create index batch_lines_pending on batch_lines (batch_id, line_index) where status = 'pending'`.execute(db);
    },
  },
  'jobs-0003_message_batches': {
    up: async (db: Kysely<any>) => {
      // Anthropic Message Batches share the table and the runner; their lines' bodies are converted ChatRequests.
      await sql`alter table batches add column kind text not null default 'batch'`.execute(db);
      await sql`create index batches_account_kind_created on batches (account_id, kind, created_at desc, id desc)`.execute(db);
    },
  },
  'jobs-0004_batch_retention': {
    up: async (db: Kysely<any>) => {
      // The retention sweep (batches/batch-retention.ts) finds finished batches by when they ended.
      await sql`
        create index batches_finished on batches ((coalesce(completed_at, failed_at, expired_at, cancelled_at)))
        where status in ('completed', 'failed', 'expired', 'cancelled')`.execute(db);
    },
  },
  // Webhook events of batches (docs/governance.md "Webhooks"): the outbox, and batch.completed written by a
  // trigger in the transaction that moves a batch to a final state, whichever path (runner, validation) did.
  'jobs-0005_batch_events': {
    up: async (db: Kysely<any>) => {
      await accountEventOutboxMigration().up(db);
      await sql.raw(`
        create function jobs.batches_to_account_events() returns trigger language plpgsql as $$
        begin
          ${outboxInsertSql('jobs', 'new.account_id', "'batch.completed'", BATCH_EVENT_DATA)}
          return null;
        end $$`).execute(db);
      await sql`
        create trigger batches_account_events after update of status on jobs.batches
        for each row
        when (new.status in ('completed', 'failed', 'expired', 'cancelled') and old.status not in ('completed', 'failed', 'expired', 'cancelled'))
        execute function jobs.batches_to_account_events()`.execute(db);
    },
  },
};
