import type { Logger } from 'pino';
import type { AuditRecord } from './audit-chain.js';
import { setAuditEntrySink } from './audit-sink.js';

/*
 * The audit log exported as OpenTelemetry log records (docs/governance.md "Export as OTLP logs"): every
 * entry a service appends (auth, ledger, catalog chains) is, once its transaction committed, one log
 * record sent over OTLP to the operator's collector, so the chain has a copy outside the gateway's
 * database (a rewritten tail no longer goes unnoticed: compare the exported hashes with the head).
 *
 * Configured by the standard OpenTelemetry variables, like traces and metrics (telemetry.ts): on when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` is set, off with
 * `OTEL_LOGS_EXPORTER=none` or `OTEL_SDK_DISABLED=true`; the protocol from
 * `OTEL_EXPORTER_OTLP_LOGS_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (http/protobuf by default, http/json,
 * grpc); headers, timeout and compression from the exporters' own variables; batching from `OTEL_BLRP_*`.
 *
 * Never on the write path's clock: the record is queued to a batch processor (bounded by
 * OTEL_BLRP_MAX_QUEUE_SIZE, 2,048 by default; past it records are dropped, never waited for) and sent in
 * the background. Only audited changes (owner, operator and catalog changes) make records, never an
 * inference request.
 */

const PROTOCOLS = ['http/protobuf', 'http/json', 'grpc'] as const;
type Protocol = (typeof PROTOCOLS)[number];
const SCOPE_NAME = 'inference-gateway.audit';

/** Whether the environment asks for the audit log's OTLP export. */
export function auditLogExportConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true') return false;
  const exporters = (env.OTEL_LOGS_EXPORTER ?? '').split(',').map((name) => name.trim());
  if (exporters.includes('none')) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT);
}

function protocolOf(env: NodeJS.ProcessEnv): Protocol {
  const named = (env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf').trim();
  if (!(PROTOCOLS as readonly string[]).includes(named)) {
    throw new Error(`OTEL_EXPORTER_OTLP_LOGS_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL must be one of ${PROTOCOLS.join(', ')} (got "${named}")`);
  }
  return named as Protocol;
}

/** The record's attributes: what a collector filters and joins on. seq as a number while it is exact. */
export function auditLogAttributes(entry: AuditRecord & { hash: string }): Record<string, string | number> {
  return {
    'gateway.audit.chain': entry.chain,
    'gateway.audit.seq': entry.seq <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(entry.seq) : entry.seq.toString(),
    'gateway.audit.actor.kind': entry.actorKind,
    'gateway.audit.actor.id': entry.actorId,
    'gateway.audit.action': entry.action,
    'gateway.audit.target.type': entry.targetType,
    'gateway.audit.target.id': entry.targetId,
    'gateway.audit.account_id': entry.accountId,
    'gateway.audit.request_id': entry.requestId,
    'gateway.audit.hash': entry.hash,
    'gateway.audit.prev_hash': entry.prevHash,
  };
}

/** A short line a person reads in a log viewer; the details are the attributes (before/after stay in the database). */
export function auditLogSummary(entry: AuditRecord): string {
  const actor = entry.actorId === '' ? entry.actorKind : `${entry.actorKind} ${entry.actorId}`;
  const account = entry.accountId === '' ? '' : ` in account ${entry.accountId}`;
  return `${entry.action} of ${entry.targetType} ${entry.targetId}${account} by ${actor} (${entry.chain} #${entry.seq})`.slice(0, 1_000);
}

export interface AuditLogExport {
  /** Sends what is queued (tests; shutdown does it too). */
  flush(): Promise<void>;
  /** Flushes, stops the exporter and removes the sink. */
  stop(): Promise<void>;
}

/**
 * Starts the export when the environment asks for it and installs it as the process's audit sink;
 * undefined when it is off. `serviceName` is the resource's service.name unless OTEL_SERVICE_NAME is set.
 */
export async function startAuditLogExport(serviceName: string, logger: Logger): Promise<AuditLogExport | undefined> {
  const env = process.env;
  if (!auditLogExportConfigured(env)) return undefined;
  const protocol = protocolOf(env);
  const [{ LoggerProvider, BatchLogRecordProcessor }, { SeverityNumber }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-logs'),
    import('@opentelemetry/api-logs'),
    import('@opentelemetry/resources'),
  ]);
  // Each exporter reads its endpoint, headers, timeout and compression from the OTEL_* variables.
  const exporter =
    protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-logs-otlp-http')).OTLPLogExporter()
      : protocol === 'grpc'
        ? new (await import('@opentelemetry/exporter-logs-otlp-grpc')).OTLPLogExporter()
        : new (await import('@opentelemetry/exporter-logs-otlp-proto')).OTLPLogExporter();
  const provider = new LoggerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME || serviceName })),
    processors: [new BatchLogRecordProcessor(exporter)],
  });
  const otelLogger = provider.getLogger(SCOPE_NAME);
  const previous = setAuditEntrySink((entry) => {
    otelLogger.emit({
      eventName: 'gateway.audit.entry',
      timestamp: Number(entry.occurredAtMs),
      severityNumber: SeverityNumber.INFO,
      severityText: 'INFO',
      body: auditLogSummary(entry),
      attributes: auditLogAttributes(entry),
    });
  });
  if (previous !== undefined) logger.warn('a second audit log export replaced the first in this process');
  logger.info({ protocol, endpoint: env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT }, 'audit log export over OTLP on');
  let stopped = false;
  return {
    flush: () => provider.forceFlush(),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      setAuditEntrySink(undefined);
      await provider.shutdown().catch((error: unknown) => logger.warn({ err: error }, 'audit log export shutdown failed'));
    },
  };
}
