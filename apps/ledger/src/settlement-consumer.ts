import { subjects, type DurableMessage, type EventBus, type Logger, type Subscription } from '@gateway/platform';
import { Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { computeCostPico, PricingError } from './cost.js';
import type { Ledger, SettlementItem } from './ledger.js';

export const SETTLER_DURABLE = 'ledger-settler';
export const BATCH_SETTLER_DURABLE = 'ledger-settler-batches';
/** One transaction never holds more than this many events (a group-commit message holds up to 256). */
export const DEFAULT_MAX_BATCH = 500;
export const DEFAULT_LINGER_MS = 2;

/**
 * No single request can honestly cost a million credits; a larger figure is a pricing or metering bug.
 * It is kept aside instead of charged, and it also keeps every sum far inside Postgres bigint.
 */
export const MAX_CHARGE_PICO = 1_000_000n * 1_000_000_000_000n;

export interface SettlementConsumerOptions {
  maxBatch?: number;
  lingerMs?: number;
  ackWaitMs?: number;
}

interface Rejected { msgId: string; requestId: string; reason: string; payload: Uint8Array }

/**
 * Turns bus messages into settlement items. Anything that can never settle (undecodable bytes, no
 * request or account id, unreadable prices) is returned as rejected rather than thrown: a throw would
 * redeliver the whole batch forever and stall every other account's charges behind it.
 */
export function prepareBatch(
  messages: readonly DurableMessage[],
  decode: (data: Uint8Array) => UsageEvent[],
  logger: Logger,
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
    for (const event of events) {
      const reject = (reason: string) =>
        rejected.push({ msgId: message.msgId, requestId: event.requestId, reason, payload: UsageEvent.encode(event).finish() });
      if (!event.requestId || !event.accountId) { reject('missing request_id or account_id'); continue; }
      if (event.outcome === UsageOutcome.USAGE_OUTCOME_UNSPECIFIED) {
        // A producer that forgot the outcome still delivered something it metered: charge rather than lose it.
        logger.warn({ request_id: event.requestId }, 'usage event without outcome; settling as served');
      }
      const served = event.outcome !== UsageOutcome.USAGE_OUTCOME_FAILED;
      const usage = event.usage ?? Usage.create();
      let costPico = 0n;
      if (served) {
        try {
          costPico = computeCostPico(usage, event.prices ?? {});
        } catch (error) {
          if (error instanceof PricingError) { reject(error.message); continue; }
          throw error;
        }
        if (costPico > MAX_CHARGE_PICO) { reject(`cost ${costPico} pico exceeds the per-request bound ${MAX_CHARGE_PICO}`); continue; }
      }
      items.push({
        requestId: event.requestId, accountId: event.accountId, keyId: event.keyId, modelId: event.modelId,
        providerId: event.providerId, endpoint: event.endpoint, served, usage, costPico,
        occurredAtMs: event.occurredAtMs, streamed: event.streamed,
      });
    }
  }
  return { items, rejected };
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
  const handler = (decode: (data: Uint8Array) => UsageEvent[]) => async (batch: DurableMessage[]) => {
    const { items, rejected } = prepareBatch(batch, decode, logger);
    if (rejected.length > 0) {
      logger.error({ rejected: rejected.map(({ msgId, requestId, reason }) => ({ msgId, requestId, reason })) }, 'usage events rejected; kept in ledger.rejected_events');
      await ledger.recordRejected(rejected);
    }
    const result = await ledger.settle(items);
    logger.debug({ messages: batch.length, events: items.length, ...result }, 'usage batch settled');
  };
  const single = await bus.consumeDurable(
    { subject: subjects.usageEvents, durable: SETTLER_DURABLE, maxBatch, lingerMs, ackWaitMs: options.ackWaitMs },
    handler((data) => [UsageEvent.decode(data)]),
  );
  // Each message already carries up to a few hundred events: fewer messages per transaction.
  const grouped = await bus.consumeDurable(
    { subject: subjects.usageBatches, durable: BATCH_SETTLER_DURABLE, maxBatch: Math.max(1, Math.floor(maxBatch / 100)), lingerMs, ackWaitMs: options.ackWaitMs },
    handler((data) => UsageEventBatch.decode(data).events),
  );
  return {
    stop: async () => {
      await Promise.all([single.stop(), grouped.stop()]);
    },
  };
}
