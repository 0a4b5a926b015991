import type { Logger } from '@gateway/platform';

/**
 * How much lower-priority work (batch lines, background responses) this jobs replica may run now
 * (docs/jobs.md "Priority"). Every `pollMs` it asks routing how busy it is with interactive requests
 * (RouterService.GetLoad): when interactive requests arrived since the last answer and routing's event
 * loop was busier than `busyAbove`, no new run starts (the share of `concurrency` the runners may fill is
 * nothing; runs going on finish); otherwise the share grows back by a quarter per poll, so a second of
 * quiet restores the whole concurrency. At a share of nothing one run may still start every `trickleMs`,
 * so a batch always moves (its completion window is hours) while interactive callers keep the machine.
 * Whether routing is busy is judged with the batch's own work in it: a batch that saturates routing
 * while an interactive request arrives gives way, grows back, and gives way again — interactive
 * latency first, the batch's pace second.
 *
 * Routing answers for the replica the poll reached; with several routing replicas the figure is a sample
 * of them. When routing does not answer (not reachable, an older version), the share is whole: work runs
 * as it did before the gate existed, bounded only by `concurrency`.
 */
export interface LoadSample {
  interactiveInFlight: number;
  /** Interactive requests routing has begun since it started (a counter). */
  interactiveStarted: bigint;
  /** 0..1 over routing's last sampling window. */
  eventLoopUtilization: number;
}

export interface PriorityGateOptions {
  pollMs: number;
  /** Routing's event-loop utilization above which interactive traffic counts as contended. */
  busyAbove: number;
  /** With a share of nothing, one run may start this often. */
  trickleMs: number;
}

export const DEFAULT_PRIORITY_GATE_OPTIONS: PriorityGateOptions = { pollMs: 250, busyAbove: 0.5, trickleMs: 1_000 };

const GROWTH_PER_POLL = 0.25;

export class PriorityGate {
  private share = 1;
  private lastStarted: bigint | undefined;
  private lastTrickleAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  private warned = false;

  constructor(
    private readonly sample: () => Promise<LoadSample>,
    private readonly options: PriorityGateOptions,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.options.pollMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The share of the configured concurrency the runners may fill now (0..1); for metrics and tests. */
  get currentShare(): number {
    return this.share;
  }

  /**
   * How many runs may be going at once now, of `concurrency`; `running` is how many are. A run started
   * on the trickle allowance is counted by `started`.
   */
  allowance(concurrency: number, running: number): number {
    const allowed = Math.floor(concurrency * this.share);
    if (allowed > 0) return allowed;
    // Nothing allowed: one at a time, at most one start per trickle interval.
    return running === 0 && this.now() - this.lastTrickleAt >= this.options.trickleMs ? 1 : 0;
  }

  /** A run started under `concurrency` (a start on the trickle allowance is timed from). */
  started(concurrency: number): void {
    if (Math.floor(concurrency * this.share) === 0) this.lastTrickleAt = this.now();
  }

  /** One poll of routing; exposed for tests. */
  async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      this.observe(await this.sample());
      this.warned = false;
    } catch (error) {
      // Not answered: work runs unrestrained rather than stalls on a missing figure.
      this.share = 1;
      this.lastStarted = undefined;
      if (!this.warned) this.logger.warn({ err: error }, 'routing load not available; lower-priority work runs at its full concurrency');
      this.warned = true;
    } finally {
      this.polling = false;
    }
  }

  /** Applies one answer of routing (exposed for tests). */
  observe(load: LoadSample): void {
    const arrived = this.lastStarted === undefined ? load.interactiveInFlight > 0 : load.interactiveStarted !== this.lastStarted || load.interactiveInFlight > 0;
    this.lastStarted = load.interactiveStarted;
    if (arrived && load.eventLoopUtilization > this.options.busyAbove) this.share = 0;
    else this.share = Math.min(1, this.share + GROWTH_PER_POLL);
  }
}
