import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import {
  boundCounter, counter, counterOf, declareMetrics, gaugeOf, sampledGauges, type BoundCounter, type BoundCounterSeries, type Counter, type Registry,
} from '@gateway/platform';
import type { UsageEvent } from '@gateway/proto';
import type { AttemptObserver, AttemptOutcome } from '../routing/attempt-observer.js';
import type { ProviderHealth } from '../strategies/index.js';
import type { StreamCheckpoint, StreamProgress } from '../usage/stream-checkpoints.js';
import type { UsageBacklog, UsagePublisher } from '../usage/usage-publisher.js';

/**
 * Provider attempts and failovers, labelled by provider (an id of the catalog: a bounded set) and
 * outcome (attempt-observer.ts). The attempts' series is bound once per (provider, outcome) and kept, so
 * an attempt adds 1 to it without prom-client checking and hashing the label set again (issue 39).
 */
export class AttemptMetrics implements AttemptObserver {
  private readonly attempts: BoundCounter<'provider' | 'outcome'>;
  private readonly failovers: Counter<'provider'>;
  private readonly attemptSeries = new Map<string, BoundCounterSeries>();

  constructor(registry: Registry) {
    this.attempts = boundCounter(registry, {
      name: 'gateway_upstream_attempts_total',
      help: 'Provider attempts by provider and outcome (success, error, timeout, rejected, cancelled, failed_after_content).',
      labelNames: ['provider', 'outcome'],
    });
    this.failovers = counter(registry, { name: 'gateway_upstream_failovers_total', help: 'Requests moved on to another provider after this provider failed.', labelNames: ['provider'] });
  }

  attempt(providerId: string, outcome: AttemptOutcome): void {
    const key = `${providerId}\0${outcome}`;
    let series = this.attemptSeries.get(key);
    if (series === undefined) {
      series = this.attempts.bind({ provider: providerId, outcome });
      this.attemptSeries.set(key, series);
    }
    series.inc(1);
  }

  failover(fromProviderId: string): void {
    this.failovers.inc({ provider: fromProviderId });
  }
}

/**
 * Each (provider, model) pair's circuit and success rate as this replica's ProviderHealth sees it,
 * read at scrape time. Pairs are the catalog's offers (ProviderHealth keeps at most 10,000).
 */
export function observeProviderHealth(registry: Registry, health: ProviderHealth): () => void {
  return sampledGauges(registry, [
    [gaugeOf('gateway_provider_circuit_open', 'Whether the circuit of this provider for this model is open (1: skipped until its cool-down ends) on this replica.', ['provider', 'model']),
      (gauge) => { for (const stat of health.localStats()) gauge.set({ provider: stat.providerId, model: stat.modelId }, stat.circuitOpen ? 1 : 0); }],
    [gaugeOf('gateway_provider_success_ratio', 'Exponentially weighted success rate of this provider for this model on this replica (0..1).', ['provider', 'model']),
      (gauge) => { for (const stat of health.localStats()) gauge.set({ provider: stat.providerId, model: stat.modelId }, 1 - stat.errorRate); }],
  ]);
}

/**
 * The usage publisher, counted: events whose publish was awaited (stored or failed) and events handed
 * to the background path (outbox first, republished until the bus takes them). Its backlog and the
 * outbox's size are gauges read at scrape time.
 */
export class ObservedUsagePublisher implements UsagePublisher {
  private readonly published: Counter<'result'>;
  private readonly background: Counter;
  private readonly stopReporting: () => void;
  private readonly onStored = () => { this.published.inc(STORED); };
  private readonly onFailed = (error: unknown) => {
    this.published.inc(FAILED);
    throw error;
  };

  constructor(private readonly inner: UsagePublisher, registry: Registry) {
    ({ published: this.published, background: this.background } = declareMetrics(registry, {
      published: counterOf('gateway_usage_events_published_total', 'Usage events whose publish the router awaited, by result (stored: the bus acknowledged it; failed).', ['result']),
      background: counterOf('gateway_usage_events_background_total', 'Usage events handed to the background path (streams already answered, releases): outbox, then republished until stored.'),
    }));
    const backlog = () => this.backlog();
    this.stopReporting = sampledGauges(registry, [
      [gaugeOf('gateway_usage_backlog_events', 'Background usage events not yet accepted by the bus.'), (gauge) => gauge.set(backlog().backgroundEvents)],
      [gaugeOf('gateway_usage_outbox_records', 'Records in the durable usage outbox not yet acknowledged: unsent events and checkpoints of streams in flight.'),
        (gauge) => gauge.set(backlog().outboxRecords)],
      [gaugeOf('gateway_usage_outbox_bytes', 'Bytes of the durable usage outbox on disk.'), (gauge) => gauge.set(backlog().outboxBytes)],
    ]);
  }

  publish(event: UsageEvent): Promise<void> {
    return this.inner.publish(event).then(this.onStored, this.onFailed);
  }

  publishInBackground(event: UsageEvent, checkpoint?: StreamCheckpoint): void {
    this.background.inc();
    this.inner.publishInBackground(event, checkpoint);
  }

  trackStream(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint {
    return this.inner.trackStream(progress, checkpointEvent);
  }

  backlog(): UsageBacklog {
    return this.inner.backlog?.() ?? NO_BACKLOG;
  }

  async stop(): Promise<void> {
    this.stopReporting();
    await this.inner.stop();
  }
}

const NO_BACKLOG: UsageBacklog = { backgroundEvents: 0, outboxRecords: 0, outboxBytes: 0 };
const STORED = { result: 'stored' } as const;
const FAILED = { result: 'failed' } as const;

/**
 * The replica's load as the autoscalers read it (the chart's keda / hpa.metric settings): requests in
 * flight (every Router call and exchange from its arrival to its answer or end) and the streamed ones
 * among them. Two integers changed once at each call's start and end, nothing per frame; read at
 * scrape time. The interactive ones among them (not RequestContext.low_priority) are also counted for
 * GetLoad, by which the jobs service's batch lines and background responses give way (docs/jobs.md
 * "Priority").
 */
export class RoutingLoad {
  private requests = 0;
  private streams = 0;
  private interactive = 0;
  private interactiveBegun = 0;
  private utilization: EventLoopUtilization | undefined;
  private sampled = { at: 0, value: 0 };

  begin(stream: boolean, lowPriority = false): void {
    this.requests++;
    if (stream) this.streams++;
    if (!lowPriority) {
      this.interactive++;
      this.interactiveBegun++;
    }
  }

  end(stream: boolean, lowPriority = false): void {
    this.requests--;
    if (stream) this.streams--;
    if (!lowPriority) this.interactive--;
  }

  /** A unary call: counted until its promise settles. */
  unary<T>(work: () => Promise<T>, lowPriority = false): Promise<T> {
    this.begin(false, lowPriority);
    let promise: Promise<T>;
    try {
      promise = work();
    } catch (error) {
      this.end(false, lowPriority);
      throw error;
    }
    return promise.finally(() => this.end(false, lowPriority));
  }

  /** A server-streaming call: counted until the call finishes (its status sent) or is cancelled, whichever comes first. */
  serverStream(call: { once(event: 'finish' | 'cancelled', listener: () => void): unknown }, lowPriority = false): void {
    this.begin(true, lowPriority);
    let ended = false;
    const done = () => {
      if (ended) return;
      ended = true;
      this.end(true, lowPriority);
    };
    call.once('finish', done);
    call.once('cancelled', done);
  }

  get inFlight(): { requests: number; streams: number } {
    return { requests: this.requests, streams: this.streams };
  }

  /**
   * GetLoad's answer. The event loop's utilization is sampled over windows of at least `windowMs`: a
   * call within a window gets the last complete window's figure, so several pollers see one figure.
   */
  interactiveLoad(now = performance.now(), windowMs = 250): { inFlight: number; started: number; eventLoopUtilization: number } {
    if (this.utilization === undefined) {
      this.utilization = performance.eventLoopUtilization();
      this.sampled = { at: now, value: 0 };
    } else if (now - this.sampled.at >= windowMs) {
      const current = performance.eventLoopUtilization();
      this.sampled = { at: now, value: performance.eventLoopUtilization(current, this.utilization).utilization };
      this.utilization = current;
    }
    return { inFlight: this.interactive, started: this.interactiveBegun, eventLoopUtilization: this.sampled.value };
  }
}

/** Reports a RoutingLoad at scrape time. Returns the function that stops it. */
export function observeRoutingLoad(registry: Registry, load: RoutingLoad): () => void {
  return sampledGauges(registry, [
    [gaugeOf('gateway_routing_requests_in_flight', 'Router calls and exchanges this replica is serving now (arrived, not yet answered or ended).'), (gauge) => gauge.set(load.inFlight.requests)],
    [gaugeOf('gateway_routing_streams_active', 'Streamed Router calls and exchanges (chat streams, speech) this replica is serving now.'), (gauge) => gauge.set(load.inFlight.streams)],
  ]);
}
