import { lookup } from 'node:dns/promises';
import { createClient, ErrorReason, GatewayError, GrpcStatus, neverSent, whenChannelReady, type CallSettings, type GrpcTarget, type Logger } from '@gateway/platform';
import {
  RouterServiceClient,
  RouterServiceService,
  type ChatRequest,
  type ChatResponse,
  type ChatStreamRequest,
  type ChatStreamResponse,
} from '@gateway/proto';
import { RouterExchange, type ChatRouter, type RouterExchangeOptions } from './router-exchange.js';

/** The routing addresses a target names now. */
export type RouterResolver = () => Promise<string[]>;

/** Resolves a target: a static list as is, a dns:/// name to every address it has (IPv4 and IPv6). */
export function resolverFor(target: Exclude<GrpcTarget, { kind: 'single' }>, lookupAll = defaultLookup): RouterResolver {
  if (target.kind === 'static') return async () => [...target.addresses];
  return async () => {
    const found = await lookupAll(target.host);
    const addresses = found.map((entry) => (entry.family === 6 ? `[${entry.address}]:${target.port}` : `${entry.address}:${target.port}`));
    return [...new Set(addresses)].sort();
  };
}

const defaultLookup = (host: string) => lookup(host, { all: true });

/** What the pool keeps per routing address: its Router.Exchange (one call at a time) and its client. */
export interface PoolMember {
  readonly address: string;
  readonly router: ChatRouter;
  /** Exchanges waiting on this member. */
  readonly openExchanges: number;
  /** Ends its calls; exchanges still open fail as UNAVAILABLE. */
  close(): void;
  /**
   * Calls `onReady` once the member's connection is up (at once when it is), connecting meanwhile
   * (tests' fakes may leave it out: the cool-down alone then decides).
   */
  watchReady?(onReady: () => void): void;
}

/** What the pool hands a new member: where it reports a broken call, and where a request it never sent may go instead. */
export interface MemberHooks {
  onCallLost: (failure?: GatewayError) => void;
  /** Another member that is up (not this one), for a request that never reached this one; undefined: none. */
  elsewhere: () => ChatRouter | undefined;
}

export interface RouterPoolOptions {
  resolve: RouterResolver;
  /** Makes the member for a newly resolved address (tests pass fakes). */
  member: (address: string, onCallLost: MemberHooks['onCallLost'], elsewhere: MemberHooks['elsewhere']) => PoolMember;
  logger: Logger;
  /** How often the target is resolved again. Default 15 s. */
  resolveIntervalMs?: number;
  /** After a member's call broke it gets no new exchanges for this long (it may be gone). Default 2 s. */
  coolDownMs?: number;
  /** How long a member that left the resolution may keep its open exchanges before it is closed. Default 10 min. */
  retireAfterMs?: number;
  now?: () => number;
}

interface Entry {
  member: PoolMember;
  coolUntil: number;
  /** Its connection is down (a call broke or found no connection): no exchanges until it is READY again. */
  down: boolean;
}

/**
 * Edge → routing client-side balancing (docs/running.md "Edge to routing: client-side balancing"): one
 * Router.Exchange per routing address the target resolves to, new exchanges spread round-robin over
 * them. The target is resolved again every `resolveIntervalMs` and soon after a call breaks, so pods
 * the HPA adds get exchanges within one interval, and removed ones stop getting new ones at once (their
 * open exchanges finish; their router drains them anyway when it stops). No DNS or allocation per request.
 *
 * A replica that is down (SIGKILLed, restarting) is ejected: once a call to it breaks or finds no
 * connection, it gets no exchange until its channel is READY again (grpc-js keeps reconnecting, at
 * most a second apart). A request whose call found no connection never reached it and goes to another
 * member once (RouterExchangeOptions.elsewhere); one that may have reached it is not sent again.
 */
export class RouterPool implements ChatRouter {
  private entries: Entry[] = [];
  private readonly byAddress = new Map<string, Entry>();
  private readonly retiring = new Set<PoolMember>();
  private next = 0;
  private resolving: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly now: () => number;

  private constructor(private readonly options: RouterPoolOptions) {
    this.now = options.now ?? Date.now;
  }

  /** Resolves the target once (a failure is logged: the pool may start empty and fill on the next round). */
  static async start(options: RouterPoolOptions): Promise<RouterPool> {
    const pool = new RouterPool(options);
    await pool.refresh();
    pool.timer = setInterval(() => void pool.refresh(), options.resolveIntervalMs ?? 15_000);
    pool.timer.unref();
    return pool;
  }

  /** The addresses exchanges go to now, in round-robin order. */
  get addresses(): string[] {
    return this.entries.map((entry) => entry.member.address);
  }

  chat(request: ChatRequest, settings: CallSettings): Promise<ChatResponse> {
    return this.pick().chat(request, settings);
  }

  chatStream(request: ChatStreamRequest, settings: CallSettings): AsyncIterable<ChatStreamResponse> {
    return this.pick().chatStream(request, settings);
  }

  /** Resolves the target again and brings the members in line; concurrent calls share one round. */
  refresh(): Promise<void> {
    this.resolving ??= this.resolveOnce().finally(() => { this.resolving = undefined; });
    return this.resolving;
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    for (const entry of this.entries) entry.member.close();
    for (const member of this.retiring) member.close();
    this.entries = [];
    this.byAddress.clear();
    this.retiring.clear();
  }

  private pick(): ChatRouter {
    const entries = this.entries;
    const count = entries.length;
    if (count === 0) throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'no routing address resolved');
    const now = this.now();
    for (let tried = 0; tried < count; tried++) {
      const entry = entries[this.next % count]!;
      this.next = (this.next + 1) % count;
      if (!entry.down && entry.coolUntil <= now) return entry.member.router;
    }
    // Every member down or cooling down: any is as good a guess as failing outright (one that is down
    // fails at once, as UNAVAILABLE: a 503).
    return entries[this.next % count]!.member.router;
  }

  /** A member other than `failed` that is up, preferring one not cooling down; undefined when none is. */
  private elsewhere(failed: Entry): ChatRouter | undefined {
    const entries = this.entries;
    const now = this.now();
    let cooling: Entry | undefined;
    for (let tried = 0; tried < entries.length; tried++) {
      const entry = entries[(this.next + tried) % entries.length]!;
      if (entry === failed || entry.down) continue;
      if (entry.coolUntil <= now) return entry.member.router;
      cooling ??= entry;
    }
    return cooling?.member.router;
  }

  private async resolveOnce(): Promise<void> {
    let addresses: string[];
    try {
      addresses = await this.options.resolve();
    } catch (error) {
      this.options.logger.warn({ err: error }, 'routing target did not resolve; keeping the known addresses');
      return;
    }
    if (this.closed) return;
    if (addresses.length === 0) {
      this.options.logger.warn('routing target resolved to no address; keeping the known addresses');
      return;
    }
    const wanted = new Set(addresses);
    const kept: Entry[] = [];
    for (const entry of this.entries) {
      if (wanted.has(entry.member.address)) kept.push(entry);
      else this.retire(entry);
    }
    for (const address of addresses) {
      if (this.byAddress.has(address)) continue;
      const entry: Entry = {
        member: this.options.member(address, (failure) => this.lost(entry, failure), () => this.elsewhere(entry)),
        coolUntil: 0,
        down: false,
      };
      this.byAddress.set(address, entry);
      kept.push(entry);
      this.options.logger.info({ address }, 'routing address added');
    }
    this.entries = kept;
  }

  /**
   * A member's call broke: skip it until its connection is up again, and look again soon (the pod may
   * be gone). A call that may have reached it (not neverSent) also cools it down for a moment: its
   * router may be stopping even though the connection stays up.
   */
  private lost(entry: Entry, failure: GatewayError | undefined): void {
    const { member } = entry;
    if (!neverSent(failure) || !member.watchReady) entry.coolUntil = this.now() + (this.options.coolDownMs ?? 2_000);
    setTimeout(() => void this.refresh(), 250).unref();
    if (!member.watchReady || entry.down) return;
    entry.down = true;
    this.options.logger.warn({ address: member.address, reason: failure?.message }, 'routing address unreachable; no exchanges until it connects again');
    member.watchReady(() => {
      if (!entry.down) return;
      entry.down = false;
      if (this.byAddress.get(member.address) === entry) this.options.logger.info({ address: member.address }, 'routing address connected again');
    });
  }

  /** Out of the resolution: no new exchanges; closed once its open ones answered, or after the bound. */
  private retire(entry: Entry): void {
    const { member } = entry;
    this.byAddress.delete(member.address);
    this.retiring.add(member);
    this.options.logger.info({ address: member.address, open_exchanges: member.openExchanges }, 'routing address removed');
    const deadline = this.now() + (this.options.retireAfterMs ?? 10 * 60_000);
    const check = () => {
      if (!this.retiring.has(member)) return;
      if (member.openExchanges > 0 && this.now() < deadline) {
        setTimeout(check, 1_000).unref();
        return;
      }
      this.retiring.delete(member);
      member.close();
    };
    check();
  }
}

/** The real member: a raw client of one routing address, and its Router.Exchange. */
export function exchangeMember(
  address: string,
  fallback: ChatRouter,
  logger: Logger,
  options: RouterExchangeOptions,
  onCallLost: MemberHooks['onCallLost'],
  elsewhere: MemberHooks['elsewhere'],
): PoolMember {
  const client = createClient(RouterServiceClient, RouterServiceService, address, { credential: options.credential });
  const exchange = new RouterExchange(client.raw, fallback, logger, { ...options, onCallLost, elsewhere });
  let closed = false;
  return {
    address,
    router: exchange,
    get openExchanges() { return exchange.openExchanges; },
    close() {
      closed = true;
      exchange.close();
      client.close();
    },
    watchReady(onReady) {
      if (!closed) whenChannelReady(client.raw, onReady);
    },
  };
}
