import { lookup } from 'node:dns/promises';
import { createClient, ErrorReason, GatewayError, GrpcStatus, type CallSettings, type GrpcTarget, type Logger } from '@gateway/platform';
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
}

export interface RouterPoolOptions {
  resolve: RouterResolver;
  /** Makes the member for a newly resolved address (tests pass fakes). */
  member: (address: string, onCallLost: () => void) => PoolMember;
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
}

/**
 * Edge → routing client-side balancing (docs/running.md "Edge to routing: client-side balancing"): one
 * Router.Exchange per routing address the target resolves to, new exchanges spread round-robin over
 * them. The target is resolved again every `resolveIntervalMs` and soon after a call breaks, so pods
 * the HPA adds get exchanges within one interval, and removed ones stop getting new ones at once (their
 * open exchanges finish; their router drains them anyway when it stops). No DNS or allocation per request.
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
      if (entry.coolUntil <= now) return entry.member.router;
    }
    // Every member cooling down: any is as good a guess as failing outright.
    return entries[this.next % count]!.member.router;
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
      const entry: Entry = { member: this.options.member(address, () => this.lost(entry)), coolUntil: 0 };
      this.byAddress.set(address, entry);
      kept.push(entry);
      this.options.logger.info({ address }, 'routing address added');
    }
    this.entries = kept;
  }

  /** A member's call broke: skip it for a moment and look again soon (the pod may be gone). */
  private lost(entry: Entry): void {
    entry.coolUntil = this.now() + (this.options.coolDownMs ?? 2_000);
    setTimeout(() => void this.refresh(), 250).unref();
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
  onCallLost: () => void,
): PoolMember {
  const client = createClient(RouterServiceClient, RouterServiceService, address, { credential: options.credential });
  const exchange = new RouterExchange(client.raw, fallback, logger, { ...options, onCallLost });
  return {
    address,
    router: exchange,
    get openExchanges() { return exchange.openExchanges; },
    close() {
      exchange.close();
      client.close();
    },
  };
}
