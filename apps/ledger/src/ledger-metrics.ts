import { counter, gauge, histogram, sampledGauge, type Registry } from '@gateway/platform';
import type { Ledger, SettlementItem, SettlementResult } from './ledger.js';

export type RefusalReason = 'rate_limited' | 'insufficient' | 'key_limit';

/**
 * The ledger's metrics: refusals (rate limits, credit), usage settlement and redelivery, and the holds
 * open right now. Labels are fixed words (reason, via, outcome, subject), never an account or key.
 */
export class LedgerMetrics {
  private readonly refusals;
  private readonly settledEvents;
  private readonly duplicateEvents;
  private readonly rejectedEvents;
  private readonly redelivered;
  private readonly settleSeconds;
  private readonly backlog;
  private readonly tokens;
  private readonly spend;
  private readonly modelSeries = new Map<string, ModelSeries>();

  constructor(registry: Registry) {
    this.refusals = counter(registry, {
      name: 'gateway_ledger_refusals_total',
      help: 'Admissions (via=admit) and lease acquisitions (via=lease) the ledger refused, by reason (rate_limited, insufficient, key_limit).',
      labelNames: ['via', 'reason'] as const,
    });
    this.settledEvents = counter(registry, {
      name: 'gateway_usage_events_settled_total',
      help: 'Usage events settled: outcome=served charged the request, outcome=failed released its hold.',
      labelNames: ['outcome'] as const,
    });
    this.duplicateEvents = counter(registry, {
      name: 'gateway_usage_events_duplicate_total',
      help: 'Served usage events whose request was already charged (a republish or redelivery): not charged again.',
    });
    this.rejectedEvents = counter(registry, {
      name: 'gateway_usage_events_rejected_total',
      help: 'Usage events that can never settle (undecodable, no ids, bad prices), kept in ledger.rejected_events.',
    });
    this.redelivered = counter(registry, {
      name: 'gateway_usage_messages_redelivered_total',
      help: 'Usage bus messages delivered again (a settler died or failed before acknowledging them).',
      labelNames: ['subject'] as const,
    });
    this.settleSeconds = histogram(registry, {
      name: 'gateway_usage_settlement_duration_seconds',
      help: 'Time to settle one batch of usage messages in one transaction.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    });
    this.backlog = gauge(registry, {
      name: 'gateway_usage_settlement_backlog_messages',
      help: 'Usage messages the bus still held for the settlers behind the last batch this replica received (JetStream delivery info), by subject.',
      labelNames: ['subject'] as const,
    });
    this.tokens = counter(registry, {
      name: 'gateway_usage_tokens_total',
      help: 'Tokens of the served usage this replica charged, by catalog model and type (input, cached_input, output, reasoning).',
      labelNames: ['model', 'type'] as const,
    });
    this.spend = counter(registry, {
      name: 'gateway_usage_spend_credits_total',
      help: 'Credits charged for served usage by this replica, by catalog model (an observation for dashboards; the charges table is the record).',
      labelNames: ['model'] as const,
    });
  }

  refused(via: 'admit' | 'lease', reason: RefusalReason): void {
    this.refusals.inc({ via, reason });
  }

  /** `pending`: what the bus still held behind the batch (undefined: the bus did not say). */
  received(subject: string, redelivered: number, rejected: number, pending?: number): void {
    if (pending !== undefined) this.backlog.set({ subject }, pending);
    if (redelivered > 0) this.redelivered.inc({ subject }, redelivered);
    if (rejected > 0) this.rejectedEvents.inc(rejected);
  }

  /** `failed`: events of the batch that released a hold (nothing to charge). */
  settled(result: SettlementResult, failed: number, seconds: number, served: readonly SettlementItem[] = []): void {
    if (result.charged > 0) this.settledEvents.inc({ outcome: 'served' }, result.charged);
    if (failed > 0) this.settledEvents.inc({ outcome: 'failed' }, failed);
    if (result.duplicates > 0) this.duplicateEvents.inc(result.duplicates);
    this.settleSeconds.observe(seconds);
    // Tokens and credits of what this batch charged. The transaction says how many, not which: a batch
    // that charged nothing (all repeats) adds nothing; one mixing new charges and repeats (a redelivery
    // beside fresh events, rare) counts its served items once each, repeats included.
    if (result.charged === 0) return;
    for (const item of served) this.charge(item);
  }

  private charge(item: SettlementItem): void {
    const series = this.seriesOf(item.modelId);
    const usage = item.usage;
    if (usage.inputTokens > 0) series.input.inc(usage.inputTokens);
    if (usage.cachedInputTokens > 0) series.cachedInput.inc(usage.cachedInputTokens);
    if (usage.outputTokens > 0) series.output.inc(usage.outputTokens);
    if (usage.reasoningTokens > 0) series.reasoning.inc(usage.reasoningTokens);
    // Pico-credits to credits for the sample only (every Prometheus sample is a float64); money moves as bigint.
    if (item.costPico > 0n) series.spend.inc(Number(item.costPico) / 1e12);
  }

  /** One model's series, looked up once and kept (models are the catalog's: a bounded set; past the cap, looked up each time). */
  private seriesOf(model: string): ModelSeries {
    let series = this.modelSeries.get(model);
    if (series === undefined) {
      series = {
        input: this.tokens.labels({ model, type: 'input' }),
        cachedInput: this.tokens.labels({ model, type: 'cached_input' }),
        output: this.tokens.labels({ model, type: 'output' }),
        reasoning: this.tokens.labels({ model, type: 'reasoning' }),
        spend: this.spend.labels({ model }),
      };
      if (this.modelSeries.size < MAX_CACHED_MODELS) this.modelSeries.set(model, series);
    }
    return series;
  }
}

interface ModelSeries {
  input: { inc(value: number): void };
  cachedInput: { inc(value: number): void };
  output: { inc(value: number): void };
  reasoning: { inc(value: number): void };
  spend: { inc(value: number): void };
}

/** Most models whose series are kept ready. */
const MAX_CACHED_MODELS = 2_000;

/** How long a count of open holds is reused: scrapes every few seconds need not each query. */
const OPEN_HOLDS_CACHE_MS = 5_000;
/** A count that takes longer (Postgres down, pool exhausted) is left out of the scrape rather than holding it. */
const OPEN_HOLDS_TIMEOUT_MS = 2_000;

function withTimeout<T>(promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs); }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Reservations and leases open right now, counted at scrape time (partial indexes on `closed_at is
 * null` make it cheap; the count is reused for a few seconds). Returns the function that stops it.
 */
export function observeOpenHolds(registry: Registry, ledger: Ledger): () => void {
  let cached: { at: number; counts: Promise<{ reservations: number; leases: number }> } | undefined;
  const counts = () => {
    const now = Date.now();
    if (cached === undefined || now - cached.at > OPEN_HOLDS_CACHE_MS) {
      const fresh = { at: now, counts: withTimeout(ledger.openHolds(), OPEN_HOLDS_TIMEOUT_MS) };
      // A failed count is not kept: the next scrape asks again.
      fresh.counts.catch(() => { if (cached === fresh) cached = undefined; });
      cached = fresh;
    }
    return cached.counts;
  };
  const removers = [
    sampledGauge(registry, { name: 'gateway_ledger_open_reservations', help: 'Reservations open now (requests admitted and not yet settled or released).' },
      async (gauge) => gauge.set((await counts()).reservations)),
    sampledGauge(registry, { name: 'gateway_ledger_open_leases', help: 'Leases open now (budgets granted to edge replicas).' },
      async (gauge) => gauge.set((await counts()).leases)),
  ];
  return () => { for (const remove of removers) remove(); };
}
