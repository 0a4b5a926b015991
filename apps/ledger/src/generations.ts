import { errors, formatCredits } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { Usage, type Generation, type GetGenerationResponse } from '@gateway/proto';
import type { LedgerDatabase } from './ledger-db.js';
import { usageColumns } from './schema.js';
import { usageFromColumns } from './settlement-batch.js';

/**
 * Generation records (migration 0010): read one for its account, and delete those past retention. The
 * record is the charge row joined with its generation row; both were written by one settlement
 * statement, so what this answers is exactly what was charged.
 */

/** How long a generation record is kept after its request settled. */
export const GENERATION_RETENTION_MS = 30 * 24 * 3_600_000;
/** Rows per delete statement and statements per sweep pass (a pass stays short whatever the backlog). */
export const GENERATION_PRUNE_BATCH_ROWS = 5_000;
export const GENERATION_PRUNE_BATCHES_PER_PASS = 10;

type Row = Record<string, unknown>;

const big = (value: unknown): bigint => (value === null || value === undefined ? 0n : BigInt(value as string | number | bigint));

/** What a record is read from: the charge row `c` joined with its generation row `g`. */
function recordColumns() {
  return sql`c.request_id, c.key_id, c.model_id, c.provider_id, c.endpoint, c.streamed, c.estimated, c.cost_pico, c.occurred_at,
    ${sql.join(usageColumns.map((column) => sql`c.${sql.ref(column)}`))},
    g.finish_reason, g.latency_ms, g.generation_time_ms, g.cancelled, g.insured_reason, g.cache_write_tokens,
    g.native_input_tokens, g.native_output_tokens, g.native_reasoning_tokens, g.native_cached_input_tokens,
    g.native_cache_write_tokens, g.native_total_tokens, g.cost_input_pico, g.cost_output_pico, g.cost_cache_read_pico,
    g.cost_cache_write_pico, g.cost_reasoning_pico`;
}

/**
 * The record of `requestId` when it belongs to `accountId`. Not found: `pending` while the request may
 * still settle — its reservation is open, or the ledger knows nothing of it yet (a leased request has no
 * reservation; its usage may be on the bus). A closed reservation without a record (failed, released,
 * expired) or a charge whose record was pruned is final. Another account's id reads like an unknown one.
 */
export async function readGeneration(db: LedgerDatabase, accountId: string, requestId: string): Promise<GetGenerationResponse> {
  const found = await sql<Row>`
    select ${recordColumns()}
    from generations g join charges c on c.request_id = g.request_id
    where g.request_id = ${requestId} and c.account_id = ${accountId} and not c.voided`.execute(db);
  const row = found.rows[0];
  if (row) return { found: true, pending: false, generation: generationOf(requestId, row) };
  const known = await sql<{ open: boolean | null; charged: boolean }>`
    select (select r.closed_at is null from reservations r where r.request_id = ${requestId} and r.account_id = ${accountId}) as open,
           exists (select 1 from charges c where c.request_id = ${requestId} and c.account_id = ${accountId}) as charged`.execute(db);
  const state = known.rows[0];
  const pending = state !== undefined && !state.charged && state.open !== false;
  return { found: false, pending, generation: undefined };
}

function generationOf(requestId: string, row: Row): Generation {
  const usage = usageFromColumns(
    Object.fromEntries(usageColumns.map((column) => [column, big(row[column])])) as Record<(typeof usageColumns)[number], bigint>,
    row.estimated === true,
  );
  usage.cacheWriteTokens = Number(big(row.cache_write_tokens));
  const reported = row.native_input_tokens !== null && row.native_input_tokens !== undefined;
  const nativeUsage = reported
    ? Usage.create({
      inputTokens: Number(big(row.native_input_tokens)),
      outputTokens: Number(big(row.native_output_tokens)),
      reasoningTokens: Number(big(row.native_reasoning_tokens)),
      cachedInputTokens: Number(big(row.native_cached_input_tokens)),
      cacheWriteTokens: Number(big(row.native_cache_write_tokens)),
      ...(row.native_total_tokens === null || row.native_total_tokens === undefined ? {} : { providerTotalTokens: Number(big(row.native_total_tokens)) }),
    })
    : undefined;
  return {
    requestId,
    keyId: row.key_id as string,
    modelId: row.model_id as string,
    providerId: row.provider_id as string,
    endpoint: row.endpoint as string,
    streamed: row.streamed === true,
    cancelled: row.cancelled === true,
    finishReason: row.finish_reason as string,
    latencyMs: Number(row.latency_ms),
    generationTimeMs: Number(row.generation_time_ms),
    usage,
    nativeUsage,
    cost: formatCredits(big(row.cost_pico)),
    costDetails: {
      input: formatCredits(big(row.cost_input_pico)),
      output: formatCredits(big(row.cost_output_pico)),
      cacheRead: formatCredits(big(row.cost_cache_read_pico)),
      cacheWrite: formatCredits(big(row.cost_cache_write_pico)),
      reasoning: formatCredits(big(row.cost_reasoning_pico)),
    },
    insuredReason: row.insured_reason as string,
    createdAtMs: BigInt((row.occurred_at as Date).getTime()),
  };
}

/** A page of ListGenerations and the cursor of the next one (empty on the last page). */
export interface GenerationPage {
  generations: Generation[];
  nextCursor: string;
}

/**
 * Where a page ends: the last record's occurred_at in Unix microseconds (the column's own precision;
 * a JS Date would cut it to milliseconds and skip or repeat ties) and its request id, which orders
 * records that occurred at the same microsecond. Base64url-wrapped so callers treat it as opaque; the
 * query stays scoped to the caller's account, so a forged cursor reveals nothing.
 */
interface GenerationCursor {
  occurredAtMicros: bigint;
  requestId: string;
}

export function encodeGenerationCursor(cursor: GenerationCursor): string {
  return Buffer.from(`g1:${cursor.occurredAtMicros}:${cursor.requestId}`, 'utf8').toString('base64url');
}

/** 9999-12-31T23:59:59.999999Z in Unix microseconds: no record's time is later. */
const LAST_CURSOR_MICROS = 253_402_300_799_999_999n;

/** Undefined for the first page; throws INVALID_ARGUMENT/INVALID_REQUEST for anything not made by encodeGenerationCursor. */
export function decodeGenerationCursor(cursor: string): GenerationCursor | undefined {
  if (cursor === '') return undefined;
  const invalid = () => errors.invalidRequest('cursor is not valid', 'cursor');
  if (cursor.length > 400 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid();
  // A request id has no control character (Postgres refuses a NUL in text), and the time is one a
  // record can have: from the epoch to the year 9999, inside what timestamptz holds.
  const match = /^g1:([0-9]{1,18}):([^\u0000-\u001f\u007f]{1,200})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw invalid();
  const occurredAtMicros = BigInt(match[1]!);
  if (occurredAtMicros > LAST_CURSOR_MICROS) throw invalid();
  return { occurredAtMicros, requestId: match[2]! };
}

/**
 * The account's records newest first (occurred_at, then request id, both descending), `limit` per page,
 * after `cursor`; with `keyId`, only that key's. Walks charges_account_occurred backwards; charges whose
 * record was pruned drop out in the join.
 */
export async function listGenerations(
  db: LedgerDatabase, accountId: string, input: { limit: number; cursor: string; keyId: string },
): Promise<GenerationPage> {
  const after = decodeGenerationCursor(input.cursor);
  const afterClause = after === undefined
    ? sql`true`
    : sql`(c.occurred_at, c.request_id) < (timestamptz 'epoch' + ${String(after.occurredAtMicros)}::bigint * interval '1 microsecond', ${after.requestId})`;
  const found = await sql<Row>`
    select ${recordColumns()}, (extract(epoch from c.occurred_at) * 1000000)::bigint::text as occurred_at_micros
    from charges c join generations g on g.request_id = c.request_id
    where c.account_id = ${accountId} and not c.voided
      and (${input.keyId} = '' or c.key_id = ${input.keyId})
      and ${afterClause}
    order by c.occurred_at desc, c.request_id desc
    limit ${input.limit + 1}`.execute(db);
  const page = found.rows.slice(0, input.limit);
  const last = page[page.length - 1];
  const nextCursor = found.rows.length > input.limit && last
    ? encodeGenerationCursor({ occurredAtMicros: BigInt(last.occurred_at_micros as string), requestId: last.request_id as string })
    : '';
  return { generations: page.map((row) => generationOf(row.request_id as string, row)), nextCursor };
}

/** Bound of GetModelLatency's answer: model × provider pairs, most requests first. */
export const MAX_MODEL_LATENCY_ROWS = 500;

export interface ModelLatencyRecord {
  modelId: string;
  providerId: string;
  requests: bigint;
  latencyP50Ms: number;
  latencyP95Ms: number;
  generationTimeP50Ms: number;
}

/**
 * Per model and provider over every account's records created in the last `days` days (the BRIN index
 * on generations.created_at bounds the scan): request count and latency percentiles. percentile_disc,
 * so each percentile is a latency some request actually had (whole milliseconds, no interpolation).
 */
export async function modelLatency(db: LedgerDatabase, days: number): Promise<ModelLatencyRecord[]> {
  const found = await sql<{ model_id: string; provider_id: string; requests: string; latency_p50: number; latency_p95: number; generation_p50: number }>`
    select c.model_id, c.provider_id, count(*)::text as requests,
           percentile_disc(0.5) within group (order by g.latency_ms) as latency_p50,
           percentile_disc(0.95) within group (order by g.latency_ms) as latency_p95,
           percentile_disc(0.5) within group (order by g.generation_time_ms) as generation_p50
    from generations g join charges c on c.request_id = g.request_id
    where g.created_at >= now() - make_interval(days => ${days}) and not c.voided
    group by c.model_id, c.provider_id
    order by count(*) desc, c.model_id, c.provider_id
    limit ${MAX_MODEL_LATENCY_ROWS}`.execute(db);
  return found.rows.map((row) => ({
    modelId: row.model_id,
    providerId: row.provider_id,
    requests: BigInt(row.requests),
    latencyP50Ms: Number(row.latency_p50),
    latencyP95Ms: Number(row.latency_p95),
    generationTimeP50Ms: Number(row.generation_p50),
  }));
}

/**
 * Deletes generation records older than `retentionMs`, `batchRows` per statement and at most
 * `maxBatches` statements per call (the next sweep continues). Charges are not touched: they are the
 * journal. Returns how many records it deleted.
 */
export async function pruneGenerations(
  db: LedgerDatabase, retentionMs = GENERATION_RETENTION_MS, batchRows = GENERATION_PRUNE_BATCH_ROWS, maxBatches = GENERATION_PRUNE_BATCHES_PER_PASS,
): Promise<number> {
  let total = 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const result = await sql`
      delete from generations where request_id in (
        select request_id from generations
        where created_at < now() - make_interval(secs => ${retentionMs / 1000})
        order by created_at limit ${batchRows}
      )`.execute(db);
    const deleted = Number(result.numAffectedRows ?? 0n);
    total += deleted;
    if (deleted < batchRows) break;
  }
  return total;
}
