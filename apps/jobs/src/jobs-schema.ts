import type { Migration } from 'kysely';
import { sql, type Kysely } from '@gateway/platform/db';
import type { FileChunksTable } from './files/file-content-store.js';

/** The jobs service's own Postgres schema: files and their chunks (batches join it later). */
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

export interface JobsDatabase {
  files: FilesTable;
  file_chunks: FileChunksTable;
}

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
};
