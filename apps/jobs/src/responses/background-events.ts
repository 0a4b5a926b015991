import type { Migration } from 'kysely';
import { EventEmitter } from 'node:events';
import { ErrorReason, GatewayError, GrpcStatus, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import { ChatStreamResponse, type BackgroundRunRecord } from '@gateway/proto';

/*
 * The stored records of a background run (docs/stored-responses.md "Streaming a background response"):
 * what `GET /v1/responses/{id}?stream=true&starting_after=N` replays and then follows. A record is the
 * start of an attempt (no chunk) or one router stream message of that attempt (ChatStreamResponse proto
 * bytes); the edge renders the responses dialect's events from them, so the jobs service keeps no
 * dialect JSON. Records are numbered per response from 0 and never rewritten: an attempt taken up again
 * after a crash appends its own start and chunks after the voided attempt's. They are written in
 * batches (RecordWriter), belong to the stored response (cascade: its retention, its delete) and are
 * bounded per response.
 */

export interface BackgroundEventsTable {
  account_id: string;
  response_id: string;
  seq: number;
  attempt: number;
  /** ChatStreamResponse bytes; null: the attempt's start. */
  chunk: Buffer | null;
}

export const backgroundEventsMigrations: Record<string, Migration> = {
  'responses-0053_background_events': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table background_events (
          account_id text not null,
          response_id text not null,
          seq integer not null,
          attempt integer not null,
          chunk bytea,
          primary key (account_id, response_id, seq),
          foreign key (account_id, response_id) references background_responses (account_id, response_id) on delete cascade
        )`.execute(db);
    },
  },
};

export interface BackgroundEventsLimits {
  /** Records one response may store (every attempt together). */
  maxRecords: number;
  /** Bytes of chunks one response may store. */
  maxBytes: number;
  /** A batch is written once this old (ms)… */
  flushDelayMs: number;
  /** …or once it holds this many records. */
  flushRecords: number;
  /** Followers (open StreamResponseEvents calls) per replica. */
  maxFollowers: number;
  /** How often a follower looks for new records when no run of this replica told it of any. */
  followPollMs: number;
}

export const DEFAULT_BACKGROUND_EVENTS_LIMITS: BackgroundEventsLimits = {
  maxRecords: 50_000,
  maxBytes: 8 * 1024 * 1024,
  flushDelayMs: 50,
  flushRecords: 256,
  maxFollowers: 256,
  followPollMs: 100,
};

/** The run went over its records' bound: it ends failed (no more of it could be streamed). */
export class RecordsBoundExceeded extends Error {}

const PAGE = 500;

/** The records of one response, shared by the runner that writes them and the followers that read them. */
export class BackgroundEvents {
  /** Wakes this replica's followers when a batch of a response was written (other replicas' runs are polled). */
  private readonly written = new EventEmitter().setMaxListeners(0);
  private followers = 0;

  constructor(
    private readonly db: Kysely<{ background_events: BackgroundEventsTable }>,
    readonly limits: BackgroundEventsLimits,
    private readonly logger: Logger,
  ) {}

  /** A writer for one attempt: records after every stored one, written only while the attempt is the response's latest. */
  async writer(accountId: string, responseId: string, attempt: number): Promise<RecordWriter> {
    const found = await sql<{ next: number; bytes: string }>`
      select coalesce(max(seq) + 1, 0)::int as next, coalesce(sum(octet_length(chunk)), 0)::text as bytes
      from background_events where account_id = ${accountId} and response_id = ${responseId}`.execute(this.db);
    const row = found.rows[0]!;
    return new RecordWriter(this, accountId, responseId, attempt, row.next, Number(row.bytes));
  }

  /** Writes a batch if `attempt` is still the running attempt of the response (a voided one writes nothing). */
  async insert(accountId: string, responseId: string, attempt: number, records: { seq: number; chunk: Buffer | null }[]): Promise<boolean> {
    if (records.length === 0) return true;
    const result = await sql`
      with latest as (
        select 1 from background_responses
        where account_id = ${accountId} and response_id = ${responseId} and attempts = ${attempt} and status = 'in_progress'
        for share)
      insert into background_events (account_id, response_id, seq, attempt, chunk)
      select ${accountId}, ${responseId}, r.seq, ${attempt}, r.chunk
      from unnest(${records.map((record) => record.seq)}::int[], ${records.map((record) => record.chunk)}::bytea[]) as r(seq, chunk)
      where exists (select 1 from latest)`.execute(this.db);
    const stored = Number(result.numAffectedRows ?? 0n) === records.length;
    if (stored) this.written.emit(`${accountId}\n${responseId}`);
    return stored;
  }

  /** Records of a response from `fromSeq`, oldest first, at most a page. */
  async read(accountId: string, responseId: string, fromSeq: number): Promise<BackgroundRunRecord[]> {
    const rows = await sql<Pick<BackgroundEventsTable, 'seq' | 'attempt' | 'chunk'>>`
      select seq, attempt, chunk from background_events
      where account_id = ${accountId} and response_id = ${responseId} and seq >= ${fromSeq}
      order by seq limit ${PAGE}`.execute(this.db);
    return rows.rows.map((row) => ({ seq: row.seq, attempt: row.attempt, chunk: row.chunk ? ChatStreamResponse.decode(row.chunk) : undefined }));
  }

  /**
   * Every record from `fromSeq`, then new ones until `finished()` says the run ended (checked before a
   * read, so the records written before the end are all sent), or the caller went away.
   */
  async *follow(accountId: string, responseId: string, fromSeq: number, finished: () => Promise<boolean>, signal: { cancelled: boolean; once(event: 'cancelled', listener: () => void): unknown }): AsyncGenerator<BackgroundRunRecord> {
    if (this.followers >= this.limits.maxFollowers) {
      throw new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, `This jobs replica streams ${this.limits.maxFollowers} background responses at once, its most; try again shortly.`, { retryAfterSeconds: 1 });
    }
    this.followers++;
    const key = `${accountId}\n${responseId}`;
    let wake: (() => void) | undefined;
    const poke = () => wake?.();
    this.written.on(key, poke);
    signal.once('cancelled', poke);
    try {
      let next = fromSeq;
      for (;;) {
        const ended = await finished();
        for (;;) {
          const page = await this.read(accountId, responseId, next);
          for (const record of page) yield record;
          if (page.length > 0) next = page[page.length - 1]!.seq + 1;
          if (page.length < PAGE) break;
        }
        if (ended || signal.cancelled) return;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.limits.followPollMs);
          wake = () => { clearTimeout(timer); resolve(); };
        });
        wake = undefined;
      }
    } finally {
      this.followers--;
      this.written.off(key, poke);
    }
  }

  get followerCount(): number {
    return this.followers;
  }
}

/**
 * One attempt's records, written in batches: a batch goes once it is `flushDelayMs` old or holds
 * `flushRecords` records (one INSERT each); a reader sees a record that late at most (plus its poll).
 * Over the response's bound `add` throws RecordsBoundExceeded.
 */
export class RecordWriter {
  private pending: { seq: number; chunk: Buffer | null }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private failure: unknown;

  constructor(
    private readonly events: BackgroundEvents,
    private readonly accountId: string,
    private readonly responseId: string,
    private readonly attempt: number,
    private nextSeq: number,
    private bytes: number,
  ) {}

  /** The attempt's start: written at once (a follower shows the run began). */
  async begin(): Promise<void> {
    this.push(null);
    await this.flush();
  }

  add(message: ChatStreamResponse): void {
    const chunk = Buffer.from(ChatStreamResponse.encode(message).finish());
    this.push(chunk);
  }

  private push(chunk: Buffer | null): void {
    const { limits } = this.events;
    this.bytes += chunk?.length ?? 0;
    if (this.nextSeq >= limits.maxRecords || this.bytes > limits.maxBytes) {
      throw new RecordsBoundExceeded(`The response's stream is over its bound (${limits.maxRecords} records, ${limits.maxBytes} bytes).`);
    }
    this.pending.push({ seq: this.nextSeq++, chunk });
    if (this.pending.length >= limits.flushRecords) this.flushQuietly();
    else this.timer ??= setTimeout(() => this.flushQuietly(), limits.flushDelayMs);
  }

  /** Whether a batch could not be written (the attempt voided or cancelled, Postgres failing): nothing more is written. */
  get failed(): boolean {
    return this.failure !== undefined;
  }

  /** A batch written on its own: a failure is kept (`failed`), and the run's last `flush` throws it. */
  private flushQuietly(): void {
    this.flush().catch(() => undefined);
  }

  /** Writes what waits (after the batch being written); throws when a batch could not be written. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = [];
    this.writing = this.writing.then(async () => {
      if (this.failure !== undefined || batch.length === 0) return;
      try {
        if (!(await this.events.insert(this.accountId, this.responseId, this.attempt, batch))) this.failure = new Error('the attempt is no longer the response\'s latest');
      } catch (error) {
        this.failure = error;
      }
    });
    await this.writing;
    if (this.failure !== undefined) throw this.failure;
  }

  /** Drops what waits (an attempt that ends without recording). */
  discard(): void {
    clearTimeout(this.timer);
    this.pending = [];
  }
}
