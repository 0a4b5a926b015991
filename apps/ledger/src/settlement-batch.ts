import type { Usage } from '@gateway/proto';
import { usageColumns } from './migrations.js';
import type { CostBreakdown } from './cost.js';
import { booleanArrayLiteral, integerArrayLiteral, nullableIntegerArrayLiteral, textArrayLiteral } from './pg-arrays.js';

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
  /** What the generation record holds besides the charge row (absent: defaults, cost details zero). */
  generation?: GenerationFacts;
}

/** The generation record's own columns (migration 0010), from the usage event and the priced usage. */
export interface GenerationFacts {
  finishReason: string;
  latencyMs: number;
  generationTimeMs: number;
  cancelled: boolean;
  /** Zero-completion insurance applied (the charge is 0): why. '' when not insured. */
  insuredReason: string;
  /** The provider's own counts; undefined when it reported none. */
  nativeUsage: Usage | undefined;
  cost: CostBreakdown;
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

/**
 * `settle_batch` (migration 0008) as a named statement, parsed and planned once per connection, with
 * the batch's generation records (migration 0010) inserted by the same statement: one INSERT … SELECT
 * over unnest per batch, in the charge's transaction. Postgres runs an unreferenced data-modifying
 * WITH after the main query, so the records are written after the charges, in request id order; a
 * redelivered request finds its record there already (`do nothing`), as it finds its charge.
 */
export const SETTLE_STATEMENT_NAME = 'ledger_settle_batch_v2';
const SETTLE_PARAMETERS = 6 + usageColumns.length + 4 + 2 + 2;
/**
 * The generation record's columns: name, SQL type, and the default a column takes when the whole batch
 * has it (its array then goes as null, read back through coalesce: unnest pads a null array with nulls).
 * Native counts have no default: null there means the provider reported none.
 */
const GENERATION_COLUMNS: ReadonlyArray<readonly [string, string, string?]> = [
  ['request_id', 'text'], ['finish_reason', 'text'], ['latency_ms', 'integer'],
  ['generation_time_ms', 'integer'], ['cancelled', 'boolean', 'false'], ['insured_reason', 'text', "''"],
  ['cache_write_tokens', 'bigint', '0'],
  ['native_input_tokens', 'bigint'], ['native_output_tokens', 'bigint'], ['native_reasoning_tokens', 'bigint'],
  ['native_cached_input_tokens', 'bigint'], ['native_cache_write_tokens', 'bigint'], ['native_total_tokens', 'bigint'],
  ['cost_input_pico', 'bigint', '0'], ['cost_output_pico', 'bigint', '0'], ['cost_cache_read_pico', 'bigint', '0'],
  ['cost_cache_write_pico', 'bigint', '0'], ['cost_reasoning_pico', 'bigint', '0'],
];
const generationParameter = (index: number) => `$${SETTLE_PARAMETERS + index + 1}::${GENERATION_COLUMNS[index]![1]}[]`;
export const SETTLE_STATEMENT =
  `with recorded as (insert into generations (${GENERATION_COLUMNS.map(([name]) => name).join(', ')}) ` +
  `select ${GENERATION_COLUMNS.map(([name, , fallback]) => (fallback === undefined ? name : `coalesce(${name}, ${fallback})`)).join(', ')} ` +
  `from unnest(${GENERATION_COLUMNS.map((_, index) => generationParameter(index)).join(', ')}) ` +
  `as g(${GENERATION_COLUMNS.map(([name]) => name).join(', ')}) ` +
  `on conflict (request_id) do nothing) ` +
  `select charged_count as charged, closed_count as closed from settle_batch(${Array.from({ length: SETTLE_PARAMETERS }, (_, index) => `$${index + 1}`).join(', ')})`;

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
    ...generationValues(served),
  ];
}

const NO_FACTS: GenerationFacts = {
  finishReason: '', latencyMs: 0, generationTimeMs: 0, cancelled: false, insuredReason: '', nativeUsage: undefined,
  cost: { total: 0n, input: 0n, output: 0n, cacheRead: 0n, cacheWrite: 0n, reasoning: 0n },
};

/**
 * The generation records' columns, GENERATION_COLUMNS' order, one element per served item. A column
 * with a default that the whole batch shares (no cancellation, no insurance, no cache price: the usual
 * chat batch) goes as null: each array element costs Postgres parse time.
 */
function generationValues(served: readonly SettlementItem[]): Array<string | null> {
  const facts = served.map((item) => item.generation ?? NO_FACTS);
  const native = (pick: (usage: Usage) => number) => nullableIntegerArrayLiteral(facts.map((fact) => (fact.nativeUsage ? pick(fact.nativeUsage) >>> 0 : undefined)));
  const pico = (pick: (cost: CostBreakdown) => bigint) => (facts.some((fact) => pick(fact.cost) !== 0n) ? integerArrayLiteral(facts.map((fact) => pick(fact.cost))) : null);
  return [
    textArrayLiteral(served.map((item) => item.requestId)),
    textArrayLiteral(facts.map((fact) => fact.finishReason)),
    integerArrayLiteral(facts.map((fact) => clampInt(fact.latencyMs))),
    integerArrayLiteral(facts.map((fact) => clampInt(fact.generationTimeMs))),
    facts.some((fact) => fact.cancelled) ? booleanArrayLiteral(facts.map((fact) => fact.cancelled)) : null,
    facts.some((fact) => fact.insuredReason !== '') ? textArrayLiteral(facts.map((fact) => fact.insuredReason)) : null,
    served.some((item) => item.usage.cacheWriteTokens !== 0) ? integerArrayLiteral(served.map((item) => item.usage.cacheWriteTokens >>> 0)) : null,
    native((usage) => usage.inputTokens),
    native((usage) => usage.outputTokens),
    native((usage) => usage.reasoningTokens),
    native((usage) => usage.cachedInputTokens),
    native((usage) => usage.cacheWriteTokens),
    // The provider's own total, null where it gave none (and for the whole batch when none did).
    facts.some((fact) => fact.nativeUsage?.providerTotalTokens !== undefined)
      ? nullableIntegerArrayLiteral(facts.map((fact) => (fact.nativeUsage?.providerTotalTokens === undefined ? undefined : fact.nativeUsage.providerTotalTokens >>> 0)))
      : null,
    pico((cost) => cost.input),
    pico((cost) => cost.output),
    pico((cost) => cost.cacheRead),
    pico((cost) => cost.cacheWrite),
    pico((cost) => cost.reasoning),
  ];
}

/** Milliseconds as a Postgres integer (uint32 on the wire; a day is far below the bound). */
function clampInt(value: number): number {
  return value > 2_147_483_647 ? 2_147_483_647 : value >>> 0;
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
