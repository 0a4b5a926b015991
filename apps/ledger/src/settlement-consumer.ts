import {
  BATCH_SETTLER_DURABLE,
  endSpanWithError,
  linkTo,
  SETTLER_DURABLE,
  SpanKind,
  subjects,
  tracer,
  tracingEnabled,
  type DurableMessage,
  type EventBus,
  type Logger,
  type Span,
  type Subscription,
} from '@gateway/platform';
import { Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { computeCostBreakdownParsed, PricingCache, PricingError, ZERO_COST, type CostBreakdown } from './cost.js';
import { honouredInsurance } from './zero-completion.js';
import type { Ledger, SettlementItem } from './ledger.js';
import { dedupeByRequest } from './settlement-batch.js';
import type { LedgerMetrics } from './ledger-metrics.js';

/**
 * One transaction never holds more than this many events (a group-commit message holds up to 256).
 * Big enough that per-transaction costs (round trips, commit fsync) vanish (5,120 settled ~10% faster
 * than 2,560 here); the rows Admit waits on are locked only for the last two statements and the commit.
 */
export const DEFAULT_MAX_BATCH = 5_120;
/** Most events in one group-commit message (the routing publisher's bound). */
export const EVENTS_PER_GROUP_MESSAGE = 256;
/**
 * How long a transaction waits to fill once it holds a first message. Nobody waits on settlement (the
 * caller got its answer when the event was durably published; the hold covers the request until then),
 * so this trades tens of milliseconds of balance freshness for far fewer transactions: in the bench at
 * 500 req/s, 2 ms made 2.5 events per transaction (ledger + Postgres ~1,200 µs of CPU per request),
 * 25 ms 13 (~440 µs), 50 ms 19 (~345 µs); at max load 50 ms made 92 per transaction (~106 µs).
 */
export const DEFAULT_LINGER_MS = 50;
/**
 * Settlement transactions in flight per subject. Two keep both cores busy (one batch is decoded
 * while Postgres writes the other); they contend only on the balance and key rows at the very end.
 */
export const DEFAULT_CONCURRENCY = 2;

/**
 * No single request can honestly cost a million credits; a larger figure is a pricing or metering bug.
 * It is kept aside instead of charged, and it also keeps every sum far inside Postgres bigint.
 */
export const MAX_CHARGE_PICO = 1_000_000n * 1_000_000_000_000n;

export interface SettlementConsumerOptions {
  /** Most events settled in one transaction. */
  maxBatch?: number;
  lingerMs?: number;
  ackWaitMs?: number;
  /** Transactions in flight per subject. */
  concurrency?: number;
  /** Called after each settled bus batch (bench and tests observe batch sizes). */
  onSettled?: (settled: { messages: number; events: number; charged: number }) => void;
  /** Settled, duplicate, rejected and redelivered usage (gateway_usage_*). */
  metrics?: LedgerMetrics;
}

export const sharedPricingCache = new PricingCache();

export interface Rejected { msgId: string; requestId: string; reason: string; payload: Uint8Array }

/**
 * Turns bus messages into settlement items. Anything that can never settle (undecodable bytes, no
 * request or account id, unreadable prices) is returned as rejected rather than thrown: a throw would
 * redeliver the whole batch forever and stall every other account's charges behind it.
 */
export function prepareBatch(
  messages: readonly DurableMessage[],
  decode: (data: Uint8Array) => UsageEvent[],
  logger: Logger,
  pricingCache: PricingCache = sharedPricingCache,
): { items: SettlementItem[]; rejected: Rejected[] } {
  const items: SettlementItem[] = [];
  const rejected: Rejected[] = [];
  for (const message of messages) {
    let events: UsageEvent[];
    try {
      events = decode(message.data);
    } catch (error) {
      rejected.push({ msgId: message.msgId, requestId: '', reason: `undecodable: ${(error as Error).message}`, payload: message.data });
      continue;
    }
    prepareEvents(events, message.msgId, logger, pricingCache, items, rejected);
  }
  return { items, rejected };
}

/**
 * Settlement items of one bus message's events (or of the events an edge hands over,
 * LedgerService.SettleUsage), appended to `items`; what can never settle is appended to `rejected`.
 */
export function prepareEvents(
  events: readonly UsageEvent[],
  msgId: string,
  logger: Logger,
  pricingCache: PricingCache,
  items: SettlementItem[],
  rejected: Rejected[],
): void {
  for (const event of events) {
    const reject = (reason: string) =>
      rejected.push({ msgId, requestId: event.requestId, reason, payload: UsageEvent.encode(event).finish() });
    if (!event.requestId || !event.accountId) { reject('missing request_id or account_id'); continue; }
    if (event.outcome === UsageOutcome.USAGE_OUTCOME_UNSPECIFIED) {
      // A producer that forgot the outcome still delivered something it metered: charge rather than lose it.
      logger.warn({ request_id: event.requestId }, 'usage event without outcome; settling as served');
    }
    const served = event.outcome !== UsageOutcome.USAGE_OUTCOME_FAILED;
    const usage = event.usage ?? Usage.create();
    let cost: CostBreakdown = ZERO_COST;
    // Zero-completion insurance: nothing delivered, nothing charged (zero-completion.ts says when).
    const insuredReason = served ? honouredInsurance(event, usage, logger) : '';
    if (served && insuredReason === '') {
      try {
        cost = computeCostBreakdownParsed(usage, pricingCache.get(event.prices ?? {}));
      } catch (error) {
        if (error instanceof PricingError) { reject(error.message); continue; }
        throw error;
      }
      if (cost.total > MAX_CHARGE_PICO) { reject(`cost ${cost.total} pico exceeds the per-request bound ${MAX_CHARGE_PICO}`); continue; }
    }
    items.push({
      requestId: event.requestId, accountId: event.accountId, keyId: event.keyId, modelId: event.modelId,
      providerId: event.providerId, endpoint: event.endpoint, served, usage, costPico: cost.total,
      occurredAtMs: event.occurredAtMs, streamed: event.streamed, leaseId: event.leaseId ?? '', traceParent: event.traceParent,
      generation: {
        finishReason: event.finishReason, latencyMs: event.latencyMs, generationTimeMs: event.generationTimeMs,
        cancelled: event.cancelled, insuredReason, nativeUsage: event.nativeUsage, cost,
      },
    });
  }
}

function settlementSpan(subject: string, messages: number, items: readonly SettlementItem[]): Span {
  const links = [];
  for (const item of items) {
    const link = linkTo(item.traceParent);
    if (link) links.push({ ...link, attributes: { 'gateway.request_id': item.requestId } });
  }
  return tracer().startSpan('usage settle', {
    kind: SpanKind.CONSUMER,
    links,
    attributes: {
      'messaging.system': 'nats', 'messaging.operation.type': 'process', 'messaging.destination.name': subject,
      'messaging.batch.message_count': messages, 'gateway.settlement.events': items.length,
    },
  });
}

/**
 * The durable consumers of usage: single events on `usage.events`, group-commit batches on
 * `usage.batches`. Each bus batch settles in one transaction; the bus acks only after it commits,
 * so a crash in between redelivers and the charges table dedups.
 */
export async function startSettlementConsumers(
  bus: EventBus,
  ledger: Ledger,
  logger: Logger,
  options: SettlementConsumerOptions = {},
): Promise<Subscription> {
  const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
  const lingerMs = options.lingerMs ?? DEFAULT_LINGER_MS;
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new Error(`maxBatch must be a positive integer: ${maxBatch}`);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 16) throw new Error(`concurrency must be 1..16: ${concurrency}`);
  const pricingCache = new PricingCache();
  const metrics = options.metrics;
  const handler = (subject: string, decode: (data: Uint8Array) => UsageEvent[]) => async (batch: DurableMessage[]) => {
    const startedAt = performance.now();
    const { items, rejected } = prepareBatch(batch, decode, logger, pricingCache);
    metrics?.received(subject, batch.reduce((count, message) => count + (message.redelivered ? 1 : 0), 0), rejected.length, batch.at(-1)?.pending);
    if (rejected.length > 0) {
      logger.error({ rejected: rejected.map(({ msgId, requestId, reason }) => ({ msgId, requestId, reason })) }, 'usage events rejected; kept in ledger.rejected_events');
      await ledger.recordRejected(rejected);
    }
    // One span per settled bus batch, linked to every request whose usage it settled (each its own trace).
    const span = tracingEnabled() ? settlementSpan(subject, batch.length, items) : undefined;
    let result: Awaited<ReturnType<Ledger['settle']>>;
    try {
      result = await ledger.settle(items);
    } catch (error) {
      if (span) endSpanWithError(span, error);
      throw error;
    }
    if (span) {
      span.setAttributes({ 'gateway.settlement.charged': result.charged, 'gateway.settlement.duplicates': result.duplicates });
      span.end();
    }
    if (metrics) {
      const failed = items.reduce((count, item) => count + (item.served ? 0 : 1), 0);
      metrics.settled(result, failed, (performance.now() - startedAt) / 1000, dedupeByRequest(items).filter((item) => item.served));
    }
    logger.debug({ messages: batch.length, events: items.length, ...result }, 'usage batch settled');
    options.onSettled?.({ messages: batch.length, events: items.length, charged: result.charged });
  };
  const single = await bus.consumeDurable(
    { subject: subjects.usageEvents, durable: SETTLER_DURABLE, maxBatch, lingerMs, ackWaitMs: options.ackWaitMs, concurrency },
    handler(subjects.usageEvents, (data) => [UsageEvent.decode(data)]),
  );
  let grouped: Subscription;
  try {
    // Each message already carries up to 256 events: fewer messages per transaction.
    grouped = await bus.consumeDurable(
      {
        subject: subjects.usageBatches, durable: BATCH_SETTLER_DURABLE, maxBatch: Math.max(1, Math.floor(maxBatch / EVENTS_PER_GROUP_MESSAGE)),
        lingerMs, ackWaitMs: options.ackWaitMs, concurrency,
      },
      handler(subjects.usageBatches, (data) => UsageEventBatch.decode(data).events),
    );
  } catch (error) {
    await single.stop();
    throw error;
  }
  const subscriptions = [single, grouped];
  return {
    stop: async () => {
      await Promise.all(subscriptions.map((subscription) => subscription.stop()));
    },
  };
}
