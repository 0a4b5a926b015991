import { randomBytes } from 'node:crypto';
import type { Migration } from 'kysely';
import { ErrorReason, GatewayError, GrpcStatus, errors, type Logger, type Registry } from '@gateway/platform';
import { createDatabase, migrate, sql, type Kysely } from '@gateway/platform/db';

export const MEDIA_SCHEMA = 'media';

/** What a stored image is: its bytes, its type and when it stops being served. */
export interface StoredImage {
  data: Uint8Array;
  contentType: string;
  expiresAt: Date;
}

/**
 * The hosted image store's port: Postgres below; an object store (S3-style, with its own expiry rule)
 * can implement the same three calls.
 */
export interface ImageStore {
  /** Stores the bytes; the same (account, idempotency key) answers the first id again. */
  put(image: { accountId: string; data: Uint8Array; contentType: string; idempotencyKey: string; ttlSeconds: number }): Promise<{ id: string; expiresAt: Date }>;
  /** Undefined when unknown or expired. */
  get(id: string, now: Date): Promise<StoredImage | undefined>;
  /** Deletes up to `limit` expired images; answers how many went. */
  deleteExpired(now: Date, limit: number): Promise<number>;
  close(): Promise<void>;
}

export const IMAGE_CONTENT_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
/** Ids are 128 random bits, base64url: unguessable, so the URL itself is the capability. */
const ID_PATTERN = /^[A-Za-z0-9_-]{22}$/;

interface ImagesTable {
  id: string;
  account_id: string;
  idempotency_key: string | null;
  content_type: string;
  data: Buffer;
  created_at: Date;
  expires_at: Date;
}

const migrations: Record<string, Migration> = {
  '0001_images': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table images (
          id text primary key,
          account_id text not null,
          idempotency_key text,
          content_type text not null,
          data bytea not null,
          created_at timestamptz not null default now(),
          expires_at timestamptz not null,
          unique (account_id, idempotency_key)
        )`.execute(db);
      await sql`create index images_expires_at on images (expires_at)`.execute(db);
    },
  },
};

export class PostgresImageStore implements ImageStore {
  private constructor(private readonly db: Kysely<{ images: ImagesTable }>) {}

  static async open(options: { databaseUrl: string; logger: Logger; metrics?: Registry }): Promise<PostgresImageStore> {
    const db = createDatabase<{ images: ImagesTable }>(
      { url: options.databaseUrl, schema: MEDIA_SCHEMA, maxConnections: 5, applicationName: 'media', ...(options.metrics ? { metrics: options.metrics } : {}) },
      options.logger,
    );
    try {
      await migrate(db, MEDIA_SCHEMA, migrations, options.logger);
    } catch (error) {
      await db.destroy();
      throw error;
    }
    return new PostgresImageStore(db);
  }

  async put(image: { accountId: string; data: Uint8Array; contentType: string; idempotencyKey: string; ttlSeconds: number }): Promise<{ id: string; expiresAt: Date }> {
    const id = randomBytes(16).toString('base64url');
    const expiresAt = new Date(Date.now() + image.ttlSeconds * 1000);
    const inserted = await this.db
      .insertInto('images')
      .values({
        id,
        account_id: image.accountId,
        idempotency_key: image.idempotencyKey || null,
        content_type: image.contentType,
        data: Buffer.from(image.data),
        expires_at: expiresAt,
      } as never)
      .onConflict((conflict) => conflict.columns(['account_id', 'idempotency_key']).doNothing())
      .returning(['id', 'expires_at'])
      .executeTakeFirst();
    if (inserted) return { id: inserted.id, expiresAt: inserted.expires_at };
    const existing = await this.db
      .selectFrom('images')
      .select(['id', 'expires_at'])
      .where('account_id', '=', image.accountId)
      .where('idempotency_key', '=', image.idempotencyKey)
      .executeTakeFirstOrThrow();
    return { id: existing.id, expiresAt: existing.expires_at };
  }

  async get(id: string, now: Date): Promise<StoredImage | undefined> {
    if (!ID_PATTERN.test(id)) return undefined;
    const row = await this.db.selectFrom('images').select(['data', 'content_type', 'expires_at']).where('id', '=', id).where('expires_at', '>', now).executeTakeFirst();
    return row ? { data: row.data, contentType: row.content_type, expiresAt: row.expires_at } : undefined;
  }

  async deleteExpired(now: Date, limit: number): Promise<number> {
    const result = await sql`
      delete from images where id in (select id from images where expires_at <= ${now} order by expires_at limit ${limit})`.execute(this.db);
    return Number(result.numAffectedRows ?? 0n);
  }

  close(): Promise<void> {
    return this.db.destroy();
  }
}

export interface ImageHostingOptions {
  /** How long a stored image is served (default 3600 s). */
  ttlSeconds: number;
  /** Largest image stored (default 20 MiB). */
  maxBytes: number;
  /** How often expired images are deleted (default 60 s). */
  sweepIntervalMs: number;
}

export const DEFAULT_IMAGE_HOSTING: ImageHostingOptions = { ttlSeconds: 3_600, maxBytes: 20 * 1024 * 1024, sweepIntervalMs: 60_000 };
const SWEEP_BATCH = 500;

/** StoreImage / GetImage over a store, with the bounds and the sweeper. */
export class ImageHosting {
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly store: ImageStore, private readonly options: ImageHostingOptions, private readonly logger: Logger) {
    this.timer = setInterval(() => void this.sweep(), options.sweepIntervalMs);
    this.timer.unref();
  }

  async storeImage(request: { accountId: string; data: Uint8Array; contentType: string; idempotencyKey: string }) {
    if (request.data.length === 0) throw errors.invalidRequest('the image is empty', 'data');
    if (request.data.length > this.options.maxBytes) {
      throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, `the image is larger than ${this.options.maxBytes} bytes`, { param: 'data' });
    }
    if (!IMAGE_CONTENT_TYPES.has(request.contentType)) throw errors.invalidRequest(`content type ${request.contentType} is not an image the gateway hosts`, 'content_type');
    const stored = await this.store.put({ ...request, ttlSeconds: this.options.ttlSeconds });
    return { imageId: stored.id, path: `/v1/images/files/${stored.id}`, expiresAt: BigInt(Math.floor(stored.expiresAt.getTime() / 1000)) };
  }

  async getImage(imageId: string) {
    const image = await this.store.get(imageId, new Date());
    if (!image) throw new GatewayError(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND, 'No such image, or it has expired.');
    return { data: Buffer.from(image.data), contentType: image.contentType };
  }

  /** Deletes expired images in bounded batches until none is left. */
  async sweep(): Promise<number> {
    let total = 0;
    try {
      for (;;) {
        const deleted = await this.store.deleteExpired(new Date(), SWEEP_BATCH);
        total += deleted;
        if (deleted < SWEEP_BATCH) break;
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'sweep of expired images failed; retrying at the next interval');
    }
    return total;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.store.close();
  }
}
