import type { Logger } from '@gateway/platform';
import { sql, type QueryExecutorProvider, type RawBuilder } from '@gateway/platform/db';
import type { PriorityGate } from './priority-gate.js';

/**
 * The work loop of the jobs service's lower-priority runners (batch lines, background responses;
 * docs/jobs.md "How a batch runs"). Every replica runs one loop per kind of work; the replicas share the
 * work through Postgres leases claimed with SKIP LOCKED (`claimLeased`), so a piece of work is run by one
 * replica at a time and a crashed replica's work is taken up by another once its lease lapses. While work
 * runs its leases are renewed every third of the lease. At most `concurrency` pieces run at once on a
 * replica, counted together with `otherRunning` (the other runners' work): one budget for all of them.
 */
export interface LeasedWorkLoopOptions {
  /** Names the loop in its logs ("batch runner"). */
  name: string;
  /** Work running at once on this replica, counted together with `otherRunning`. */
  concurrency: number;
  /** A lease not renewed for this long is taken up by another replica (renewed every third of it). */
  leaseMs: number;
  /** How often the loop looks for work when it found none. */
  pollIntervalMs: number;
}

/** What a runner does in the loop. */
export interface LeasedWork {
  /** One round: claims work for the free slots (`LeasedWorkLoop.free`) and launches it. */
  round(): Promise<void>;
  /** Renews this replica's leases; called every third of the lease. */
  renew(): Promise<void>;
}

/** `now()` plus `ms`: the end of a lease taken or renewed now. */
export function leaseUntil(ms: number): RawBuilder<Date> {
  return sql<Date>`now() + make_interval(secs => ${ms / 1000})`;
}

export interface LeasedClaim {
  table: string;
  /** The row's key columns. */
  keys: readonly string[];
  /** Which rows are waiting to run (their lease lapsed or never taken is added here). */
  where: RawBuilder<unknown>;
  orderBy: string;
  limit: number;
  owner: string;
  leaseMs: number;
  /** More to set on a claimed row (`status = 'in_progress'`). */
  set?: RawBuilder<unknown>;
  /** The columns returned; every column when left out. */
  returning?: readonly string[];
}

/**
 * Claims up to `limit` waiting rows for `owner` (one statement, SKIP LOCKED: two replicas never claim the
 * same row), counting an attempt on each and leasing it for `leaseMs`.
 */
export async function claimLeased<Row>(db: QueryExecutorProvider, claim: LeasedClaim): Promise<Row[]> {
  const column = (name: string) => sql.ref(`t.${name}`);
  const claimed = await sql<Row>`
    with picked as (
      select ${sql.join(claim.keys.map((key) => sql.ref(key)))} from ${sql.table(claim.table)}
      where ${claim.where} and (lease_expires_at is null or lease_expires_at < now())
      order by ${sql.ref(claim.orderBy)} limit ${claim.limit} for update skip locked)
    update ${sql.table(claim.table)} t set ${claim.set ? sql`${claim.set}, ` : sql``}attempts = t.attempts + 1,
      lease_owner = ${claim.owner}, lease_expires_at = ${leaseUntil(claim.leaseMs)}
    from picked where ${sql.join(claim.keys.map((key) => sql`${column(key)} = ${sql.ref(`picked.${key}`)}`), sql` and `)}
    returning ${claim.returning ? sql.join(claim.returning.map(column)) : sql`t.*`}`.execute(db);
  return claimed.rows;
}

export class LeasedWorkLoop<Value = undefined> {
  private readonly running = new Map<string, { done: Promise<void>; value: Value }>();
  private timer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private ticking = false;
  private halted = false;
  /** Claim rounds and lease renewals running now: stop() waits for them before the pool may go. */
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly options: LeasedWorkLoopOptions,
    private readonly work: LeasedWork,
    private readonly logger: Logger,
    /** The other runners' work on this replica: it shares `concurrency`. */
    private readonly otherRunning: () => number = () => 0,
    /** How much of `concurrency` interactive traffic leaves to lower-priority work now (priority-gate.ts). */
    private readonly gate?: PriorityGate,
  ) {}

  /** Work running on this loop now (the other runners count it against the shared budget). */
  get runningCount(): number {
    return this.running.size;
  }

  get stopped(): boolean {
    return this.halted;
  }

  /** Slots free in the shared budget, of what interactive traffic leaves to it (none once stopped). */
  free(): number {
    if (this.halted) return 0;
    const busy = this.running.size + this.otherRunning();
    return (this.gate?.allowance(this.options.concurrency, busy) ?? this.options.concurrency) - busy;
  }

  /** The keys of the work running on this replica. */
  keys(): string[] {
    return [...this.running.keys()];
  }

  /** What `launch` attached to a running piece of work. */
  get(key: string): Value | undefined {
    return this.running.get(key)?.value;
  }

  values(): Value[] {
    return [...this.running.values()].map((entry) => entry.value);
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.options.pollIntervalMs);
    this.timer.unref();
    this.heartbeat = setInterval(() => void this.renew(), Math.max(100, Math.floor(this.options.leaseMs / 3)));
    this.heartbeat.unref();
    void this.tick();
  }

  /**
   * Stops taking work; work running finishes within `graceMs` (else its lease lapses and another replica
   * takes it). A claim round or a lease renewal already running is waited for too, within the same grace:
   * the caller destroys the pool next, and a round still running would then fail on it.
   */
  async stop(graceMs = 10_000): Promise<void> {
    this.halted = true;
    clearInterval(this.timer);
    const until = Date.now() + graceMs;
    // Leases are still renewed while the work finishes; a round in flight may launch work: waited for as well.
    await this.settle(() => [...this.inFlight, ...[...this.running.values()].map((entry) => entry.done)], until);
    clearInterval(this.heartbeat);
    // A renewal the heartbeat began meanwhile.
    await this.settle(() => [...this.inFlight], until);
  }

  /** Waits until nothing `pending` names is left (each settled removes itself), or until `until`. */
  private async settle(pending: () => Promise<void>[], until: number): Promise<void> {
    for (let waiting = pending(); waiting.length > 0 && Date.now() < until; waiting = pending()) {
      let bound: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled(waiting), new Promise((resolve) => { bound = setTimeout(resolve, until - Date.now()); })]);
      clearTimeout(bound);
    }
  }

  /** Runs `work` as a round or renewal in flight (stop() waits for it). */
  private track(work: () => Promise<void>): Promise<void> {
    const tracked: Promise<void> = work().finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
    return tracked;
  }

  /** One renewal of this replica's leases (the heartbeat's), none once stopped and the work ended. */
  private renew(): Promise<void> {
    return this.track(() => this.work.renew()).catch((error: unknown) => {
      this.logger.warn({ err: error }, `${this.options.name} renewing leases failed`);
    });
  }

  /** One round, never two at once; a failed round is logged and the next poll tries again. */
  async tick(): Promise<void> {
    if (this.ticking || this.halted) return;
    this.ticking = true;
    try {
      await this.track(() => this.work.round());
    } catch (error) {
      this.logger.warn({ err: error }, `${this.options.name} round failed; retried next round`);
    } finally {
      this.ticking = false;
    }
  }

  /**
   * Runs a claimed piece of work under `key`. A failure of `run` goes to `failed` (its lease lapses and it
   * runs again); when it ends, `ended` is called and the loop looks for more at once.
   */
  launch(key: string, value: Value, run: () => Promise<void>, failed: (error: unknown) => void, ended?: () => void): void {
    this.gate?.started(this.options.concurrency);
    const done = run()
      .catch(failed)
      .finally(() => {
        this.running.delete(key);
        ended?.();
        // Room again: look for more at once rather than at the next poll.
        if (!this.halted) void this.tick();
      });
    this.running.set(key, { done, value });
  }
}

/**
 * A runner over its own LeasedWorkLoop (the batch runner, the background runner). What the service asks of a
 * runner (its running count for the shared budget, start, stop, one round by hand) is the loop's, answered
 * here once for both; each runner says what its round claims and how its leases are renewed.
 */
export abstract class LeasedRunner<Value> {
  protected readonly loop: LeasedWorkLoop<Value>;

  constructor(options: LeasedWorkLoopOptions, logger: Logger, otherRunning?: () => number, gate?: PriorityGate) {
    this.loop = new LeasedWorkLoop<Value>(options, { round: () => this.round(), renew: () => this.renew() }, logger, otherRunning, gate);
  }

  /** One round: claims work for the loop's free slots and launches it. */
  protected abstract round(): Promise<void>;

  /** Renews the leases of the work this replica runs. */
  protected abstract renew(): Promise<void>;

  /** Work running on this replica now (the other runner counts it against the shared budget). */
  get runningCount(): number {
    return this.loop.runningCount;
  }

  start(): void {
    this.loop.start();
  }

  /** Stops taking work; work running finishes (its lease lapses otherwise, and another replica takes it). */
  stop(graceMs?: number): Promise<void> {
    return this.loop.stop(graceMs);
  }

  /** One round now (the poll runs them too). */
  tick(): Promise<void> {
    return this.loop.tick();
  }
}
