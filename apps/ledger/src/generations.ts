import { formatCredits } from '@gateway/platform';
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

/**
 * The record of `requestId` when it belongs to `accountId`. Not found: `pending` while the request may
 * still settle — its reservation is open, or the ledger knows nothing of it yet (a leased request has no
 * reservation; its usage may be on the bus). A closed reservation without a record (failed, released,
 * expired) or a charge whose record was pruned is final. Another account's id reads like an unknown one.
 */
export async function readGeneration(db: LedgerDatabase, accountId: string, requestId: string): Promise<GetGenerationResponse> {
  const found = await sql<Row>`
    select c.key_id, c.model_id, c.provider_id, c.endpoint, c.streamed, c.estimated, c.cost_pico, c.occurred_at,
           ${sql.join(usageColumns.map((column) => sql`c.${sql.ref(column)}`))},
           g.finish_reason, g.latency_ms, g.generation_time_ms, g.cancelled, g.insured_reason, g.cache_write_tokens,
           g.native_input_tokens, g.native_output_tokens, g.native_reasoning_tokens, g.native_cached_input_tokens,
           g.native_cache_write_tokens, g.cost_input_pico, g.cost_output_pico, g.cost_cache_read_pico,
           g.cost_cache_write_pico, g.cost_reasoning_pico
    from generations g join charges c on c.request_id = g.request_id
    where g.request_id = ${requestId} and c.account_id = ${accountId}`.execute(db);
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
