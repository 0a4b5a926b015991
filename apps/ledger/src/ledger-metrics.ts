import { counterOf, declareMetrics, gaugeOf, histogramOf, sampledGauges, type DeclaredMetrics, type Registry } from '@gateway/platform';
import type { Ledger, SettlementItem, SettlementResult } from './ledger.js';

export type RefusalReason = 'rate_limited' | 'insufficient' | 'key_limit' | 'budget';

/** The ledger's counters, histogram and gauge (labels are fixed words, never an account or key). */
const LEDGER_METRICS = {
  refusals: counterOf('gateway_ledger_refusals_total', 'Admissions (via=admit) and lease acquisitions (via=lease) the ledger refused, by reason (rate_limited, insufficient, key_limit, budget).', ['via', 'reason']),
  settledEvents: counterOf('gateway_usage_events_settled_total', 'Usage events settled: outcome=served charged the request, outcome=failed released its hold.', ['outcome']),
  duplicateEvents: counterOf('gateway_usage_events_duplicate_total', 'Served usage events whose request was already charged (a republish or redelivery): not charged again.'),
  rejectedEvents: counterOf('gateway_usage_events_rejected_total', 'Usage events that can never settle (undecodable, no ids, bad prices), kept in ledger.rejected_events.'),
  redelivered: counterOf('gateway_usage_messages_redelivered_total', 'Usage bus messages delivered again (a settler died or failed before acknowledging them).', ['subject']),
  settleSeconds: histogramOf('gateway_usage_settlement_duration_seconds', 'Time to settle one batch of usage messages in one transaction.', [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]),
  backlog: gaugeOf('gateway_usage_settlement_backlog_messages', 'Usage messages the bus still held for the settlers behind the last batch this replica received (JetStream delivery info), by subject.', ['subject']),
  tokens: counterOf('gateway_usage_tokens_total', 'Tokens of the served usage this replica charged, by catalog model and type (input, cached_input, output, reasoning).', ['model', 'type']),
  spend: counterOf('gateway_usage_spend_credits_total', 'Credits charged for served usage by this replica, by catalog model (an observation for dashboards; the charges table is the record).', ['model']),
};

/**
 * The ledger's metrics: refusals (rate limits, credit), usage settlement and redelivery, and the holds
 * open right now. Labels are fixed words (reason, via, outcome, subject), never an account or key.
 */
export class LedgerMetrics {
  private readonly metrics: DeclaredMetrics<typeof LEDGER_METRICS>;
  private readonly modelSeries = new Map<string, ModelSeries>();

  constructor(registry: Registry) {
    this.metrics = declareMetrics(registry, LEDGER_METRICS);
  }

  refused(via: 'admit' | 'lease', reason: RefusalReason): void {
    this.metrics.refusals.inc({ via, reason });
  }

  /** `pending`: what the bus still held behind the batch (undefined: the bus did not say). */
  received(subject: string, redelivered: number, rejected: number, pending?: number): void {
    if (pending !== undefined) this.metrics.backlog.set({ subject }, pending);
    if (redelivered > 0) this.metrics.redelivered.inc({ subject }, redelivered);
    if (rejected > 0) this.metrics.rejectedEvents.inc(rejected);
  }

  /** `failed`: events of the batch that released a hold (nothing to charge). */
  settled(result: SettlementResult, failed: number, seconds: number, served: readonly SettlementItem[] = []): void {
    if (result.charged > 0) this.metrics.settledEvents.inc({ outcome: 'served' }, result.charged);
    if (failed > 0) this.metrics.settledEvents.inc({ outcome: 'failed' }, failed);
    if (result.duplicates > 0) this.metrics.duplicateEvents.inc(result.duplicates);
    this.metrics.settleSeconds.observe(seconds);
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
        input: this.metrics.tokens.labels({ model, type: 'input' }),
        cachedInput: this.metrics.tokens.labels({ model, type: 'cached_input' }),
        output: this.metrics.tokens.labels({ model, type: 'output' }),
        reasoning: this.metrics.tokens.labels({ model, type: 'reasoning' }),
        spend: this.metrics.spend.labels({ model }),
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
  return sampledGauges(registry, [
    [gaugeOf('gateway_ledger_open_reservations', 'Reservations open now (requests admitted and not yet settled or released).'), async (gauge) => gauge.set((await counts()).reservations)],
    [gaugeOf('gateway_ledger_open_leases', 'Leases open now (budgets granted to edge replicas).'), async (gauge) => gauge.set((await counts()).leases)],
  ]);
}
