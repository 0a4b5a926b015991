import type { Usage } from '@gateway/proto';
import { usageColumns } from './migrations.js';
import { booleanArrayLiteral, integerArrayLiteral, textArrayLiteral } from './pg-arrays.js';

/*
 * A settlement batch as `settle_batch` (migration 0008) takes it: one item per request, array
 * parameters in the function's argument order, and the usage columns mapped to Usage's fields.
 */

/** One event ready to settle: the decoded event plus its price, computed before the transaction. */
export interface SettlementItem {
  requestId: string;
  accountId: string;
  keyId: string;
  modelId: string;
  providerId: string;
  endpoint: string;
  served: boolean;
  usage: Usage;
  costPico: bigint;
  occurredAtMs: bigint;
  streamed: boolean;
  /** The lease the request was admitted against; '' for a per-request reservation. */
  leaseId?: string;
  /** The request's W3C traceparent ('' or absent: not traced); the settlement span links to it. */
  traceParent?: string;
}

export interface SettlementResult {
  charged: number;
  duplicates: number;
  reservationsClosed: number;
}

/** The largest value a uint32 field of the answers carries; bigger sums are capped to it. */
export const UINT32_MAX = 4_294_967_295n;

/**
 * One item per request id, in request id order (two settlers inserting overlapping batches then
 * wait on each other in the same order); a served event wins over a failed one (never lose a charge).
 */
export function dedupeByRequest(items: readonly SettlementItem[]): SettlementItem[] {
  const byRequest = new Map<string, SettlementItem>();
  for (const item of items) {
    const seen = byRequest.get(item.requestId);
    if (!seen || (!seen.served && item.served)) byRequest.set(item.requestId, item);
  }
  return [...byRequest.values()].sort((left, right) => (left.requestId < right.requestId ? -1 : left.requestId > right.requestId ? 1 : 0));
}

/** `settle_batch` (migration 0008) as a named statement: parsed and planned once per connection. */
export const SETTLE_STATEMENT_NAME = 'ledger_settle_batch_v1';
const SETTLE_PARAMETERS = 6 + usageColumns.length + 4 + 2 + 2;
export const SETTLE_STATEMENT = `select charged_count as charged, closed_count as closed from settle_batch(${Array.from({ length: SETTLE_PARAMETERS }, (_, index) => `$${index + 1}`).join(', ')})`;

/**
 * The batch as `settle_batch`'s array parameters, in its argument order: array literals built in one
 * pass (src/pg-arrays.ts). A usage column that is zero for the whole batch goes as null (read as 0):
 * a chat batch uses 3–4 of the 14, and every array element costs parse time in Postgres.
 */
export function settleBatchValues(all: readonly SettlementItem[], served: readonly SettlementItem[]): Array<string | null> {
  const leased = served.filter((item) => item.leaseId);
  return [
    textArrayLiteral(served.map((item) => item.requestId)),
    textArrayLiteral(served.map((item) => item.accountId)),
    textArrayLiteral(served.map((item) => item.keyId)),
    textArrayLiteral(served.map((item) => item.modelId)),
    textArrayLiteral(served.map((item) => item.providerId)),
    textArrayLiteral(served.map((item) => item.endpoint)),
    ...usageColumns.map((name) => (served.some((item) => usageValue(item.usage, name) !== 0)
      ? integerArrayLiteral(served.map((item) => usageValue(item.usage, name)))
      : null)),
    booleanArrayLiteral(served.map((item) => item.usage.estimated)),
    integerArrayLiteral(served.map((item) => item.costPico)),
    booleanArrayLiteral(served.map((item) => item.streamed)),
    integerArrayLiteral(served.map((item) => item.occurredAtMs)),
    textArrayLiteral(all.map((item) => item.requestId)),
    booleanArrayLiteral(all.map((item) => item.served)),
    textArrayLiteral(leased.map((item) => item.requestId)),
    textArrayLiteral(leased.map((item) => item.leaseId!)),
  ];
}

const usageFieldByColumn: Record<(typeof usageColumns)[number], keyof Usage> = {
  input_tokens: 'inputTokens', cached_input_tokens: 'cachedInputTokens', output_tokens: 'outputTokens',
  reasoning_tokens: 'reasoningTokens', input_audio_tokens: 'inputAudioTokens', output_audio_tokens: 'outputAudioTokens',
  input_audio_ms: 'inputAudioMs', output_audio_ms: 'outputAudioMs', output_text_tokens: 'outputTextTokens',
  input_text_characters: 'inputTextCharacters', output_text_characters: 'outputTextCharacters',
  output_image_tokens: 'outputImageTokens', input_image_tokens: 'inputImageTokens', input_text_tokens: 'inputTextTokens',
};

export function usageValue(usage: Usage, column: (typeof usageColumns)[number]): number {
  return Number(usage[usageFieldByColumn[column]]) >>> 0;
}

export function usageFromColumns(values: Record<(typeof usageColumns)[number], bigint>, estimated: boolean): Usage {
  // cache_write_tokens is not kept: it is a part of input_tokens (and priced as input), reported per
  // answer by the messages dialect only.
  const usage = { estimated, cacheWriteTokens: 0 } as Usage;
  for (const column of usageColumns) {
    const value = values[column];
    (usage as unknown as Record<string, number>)[usageFieldByColumn[column]] = Number(value > UINT32_MAX ? UINT32_MAX : value);
  }
  return usage;
}
