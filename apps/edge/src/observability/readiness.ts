import { createHealthClient, type HealthClient } from '@gateway/platform';

export interface ReadinessReport {
  ready: boolean;
  /** Each check's verdict: `ok`, or what is wrong (`NOT_SERVING`, `unreachable: ...`, `draining`). */
  checks: Record<string, string>;
}

export interface ReadinessOptions {
  /** The catalog's first snapshot is loaded. */
  catalogReady: () => boolean;
  /** The edge has started draining (stop). */
  draining: () => boolean;
  /** Services whose gRPC health must be SERVING: auth, ledger, routing. */
  services: Readonly<Record<string, string>>;
  /** How long one report is reused. Default 1 s. */
  cacheMs?: number;
  /** Bound of one health call. Default 1 s. */
  timeoutMs?: number;
}

/**
 * `/readyz`: the edge can answer inference requests — catalog loaded, not draining, and auth, ledger
 * and routing SERVING on their gRPC health (which itself reflects their Postgres and NATS). One report
 * is reused for about a second and concurrent probes share one round of calls, so probing is cheap
 * for the services behind it.
 */
export class Readiness {
  private readonly clients: Array<{ name: string; client: HealthClient }>;
  private cached: { at: number; report: Promise<ReadinessReport> } | undefined;

  constructor(private readonly options: ReadinessOptions) {
    this.clients = Object.entries(options.services).map(([name, address]) => ({ name, client: createHealthClient(address) }));
  }

  report(): Promise<ReadinessReport> {
    // Draining answers at once: a balancer must see it on its very next probe.
    if (this.options.draining()) return Promise.resolve({ ready: false, checks: { edge: 'draining' } });
    const now = performance.now();
    if (this.cached === undefined || now - this.cached.at > (this.options.cacheMs ?? 1_000)) {
      this.cached = { at: now, report: this.check() };
    }
    return this.cached.report;
  }

  close(): void {
    for (const { client } of this.clients) client.close();
  }

  private async check(): Promise<ReadinessReport> {
    const checks: Record<string, string> = { catalog: this.options.catalogReady() ? 'ok' : 'not loaded' };
    const timeoutMs = this.options.timeoutMs ?? 1_000;
    await Promise.all(this.clients.map(async ({ name, client }) => {
      try {
        const status = await client.check('', timeoutMs);
        checks[name] = status === 'SERVING' ? 'ok' : status;
      } catch (error) {
        checks[name] = `unreachable: ${error instanceof Error ? error.message : String(error)}`;
      }
    }));
    return { ready: Object.values(checks).every((verdict) => verdict === 'ok'), checks };
  }
}
