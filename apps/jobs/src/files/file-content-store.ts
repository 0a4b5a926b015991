import { sql, type Kysely } from '@gateway/platform/db';
import type { JobsDatabase } from '../jobs-schema.js';

/**
 * Where a file's bytes live, apart from its metadata (which is always in the jobs schema). Postgres
 * below (bytea chunks); an object store can implement the same four calls later (a multipart upload per
 * file, a ranged GET per read). Chunks are written at their byte offset, so a retried write of the same
 * chunk replaces it instead of adding a second copy.
 */
export interface FileContentStore {
  /** Stores `data` at `offset` of the file (replacing a chunk already there). */
  write(fileId: string, offset: number, data: Uint8Array): Promise<void>;
  /** Up to `maxBytes` from `offset`; fewer (or none) at the end of the file. */
  read(fileId: string, offset: number, maxBytes: number): Promise<Buffer>;
  /** Forgets every byte of the file. */
  delete(fileId: string): Promise<void>;
  /** Bytes stored for the file (the sum of its chunks). */
  storedBytes(fileId: string): Promise<number>;
}

/** Postgres: one row per chunk (at most one AppendUpload's data, 1 MiB), keyed by (file, offset). */
export class PostgresFileContentStore implements FileContentStore {
  constructor(private readonly db: Kysely<JobsDatabase>) {}

  async write(fileId: string, offset: number, data: Uint8Array): Promise<void> {
    const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    await sql`
      insert into file_chunks (file_id, offset_bytes, data) values (${fileId}, ${offset}, ${bytes})
      on conflict (file_id, offset_bytes) do update set data = excluded.data`.execute(this.db);
  }

  async read(fileId: string, offset: number, maxBytes: number): Promise<Buffer> {
    const end = offset + maxBytes;
    // The chunks overlapping [offset, end), in order; each is cut to the range.
    const rows = await sql<{ offset_bytes: bigint; data: Buffer }>`
      select offset_bytes, data from file_chunks
      where file_id = ${fileId} and offset_bytes < ${end} and offset_bytes + length(data) > ${offset}
      order by offset_bytes`.execute(this.db);
    const parts: Buffer[] = [];
    for (const row of rows.rows) {
      const start = Number(row.offset_bytes);
      parts.push(row.data.subarray(Math.max(0, offset - start), Math.min(row.data.length, end - start)));
    }
    return Buffer.concat(parts);
  }

  async delete(fileId: string): Promise<void> {
    await sql`delete from file_chunks where file_id = ${fileId}`.execute(this.db);
  }

  async storedBytes(fileId: string): Promise<number> {
    const row = await sql<{ total: bigint | null }>`select sum(length(data))::int8 as total from file_chunks where file_id = ${fileId}`.execute(this.db);
    return Number(row.rows[0]?.total ?? 0n);
  }
}
