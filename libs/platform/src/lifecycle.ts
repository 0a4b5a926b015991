import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { commonEnv, ConfigError, internalAuthEnv, internalAuthFromEnv, loadConfig, natsUrl } from './config.js';
import type { InternalAuth } from './grpc/internal-auth.js';
import { createLogger } from './logger.js';
import { NatsEventBus, type EventBus } from './bus/index.js';
import { startProcessMetrics } from './metrics/metrics-server.js';
import { startTelemetry } from './telemetry.js';

export interface Stoppable {
  stop(): Promise<void>;
}

/**
 * A start-up failure whose message already says everything a person needs to act on (what is wrong and
 * what to do), so it is printed as plain text, not as a log record with a stack.
 */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}

/**
 * Checks at start that a directory the service writes to is writable: creates it (with its parents),
 * writes a probe file into it and removes the file. A StartupError naming the env variable and the path
 * otherwise, so a read-only root filesystem or a volume owned by another user stops the process with
 * one line instead of failing the first request that needs the directory.
 */
export async function assertWritableDirectory(variable: string, directory: string, hint: string): Promise<void> {
  const path = resolve(directory);
  const probe = join(path, `.write-probe-${process.pid}`);
  try {
    await mkdir(path, { recursive: true });
    await writeFile(probe, '');
    await rm(probe, { force: true });
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new StartupError(`${variable}=${path} is not writable (${reason}): ${hint}`);
  }
}

/**
 * Entry point shared by every service's main.ts: starts it, stops it cleanly on SIGINT/SIGTERM, and
 * turns a start-up failure into one readable line and exit code 1.
 */
export async function runMain(name: string, logger: Logger, start: () => Promise<Stoppable>): Promise<void> {
  let running: Stoppable;
  // Tracing first (when configured): every span of the service, from its first call, has a provider.
  let stopTelemetry: () => Promise<void> = async () => {};
  try {
    stopTelemetry = await startTelemetry(name, logger);
    running = await start();
  } catch (error) {
    if (error instanceof ConfigError || error instanceof StartupError) {
      process.stderr.write(`${name}: ${error.message}\n`);
    } else {
      // The cause goes into the message itself: fatal is above every level, and a rejection without an
      // Error (some libraries reject with nothing) would otherwise leave a bare "failed to start".
      const cause = error instanceof Error ? error : new Error(`rejected with ${String(error)}`);
      logger.fatal({ err: cause }, `${name} failed to start: ${cause.message}`);
    }
    await stopTelemetry();
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) { process.exit(130); }
    stopping = true;
    logger.info({ signal }, `${name} stopping`);
    // Spans of the last requests are flushed after the service stopped taking them.
    running.stop().then(() => stopTelemetry().then(() => process.exit(0)), (error: unknown) => {
      logger.error({ err: error }, 'unclean stop');
      void stopTelemetry().finally(() => process.exit(1));
    });
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}

/** The services whose RPCs include admin ones (internal-auth ADMIN_METHODS): they need GATEWAY_ADMIN_TOKEN. */
const ADMIN_SERVICES = new Set(['auth', 'ledger', 'catalog']);

/** Env every NATS-connected service reads (an empty NATS_NAMESPACE counts as unset). */
export const busEnv = {
  NATS_URL: natsUrl,
  NATS_NAMESPACE: z.string().optional().transform((value) => value || undefined),
};

/** What runBusService hands a service besides its config, bus and logger. */
export interface ServiceRuntime {
  /** The process's metrics registry (served on METRICS_PORT when set). */
  metrics: Registry;
  /** Internal gRPC authentication (GATEWAY_INTERNAL_TOKEN / GATEWAY_ADMIN_TOKEN); undefined when off. */
  internalAuth: InternalAuth | undefined;
}

/**
 * The whole main.ts of a NATS-connected service: reads its env (commonEnv + busEnv + its own shape),
 * connects the bus, starts the metrics server (METRICS_PORT) and the service, and stops them in
 * order — or closes what was opened when start fails.
 */
export function runBusService<Shape extends z.ZodRawShape>(
  name: string,
  shape: Shape,
  start: (
    config: z.infer<z.ZodObject<typeof commonEnv & typeof busEnv & Shape>>,
    bus: EventBus,
    logger: Logger,
    runtime: ServiceRuntime,
  ) => Promise<Stoppable>,
): Promise<void> {
  const logger = createLogger(name);
  return runMain(name, logger, async () => {
    const config = loadConfig({ ...commonEnv, ...busEnv, ...shape }) as z.infer<z.ZodObject<typeof commonEnv & typeof busEnv & Shape>>;
    // The shared part, read again with its concrete types (the generic one above is for the caller).
    const shared = loadConfig({ ...commonEnv, ...busEnv });
    logger.level = shared.LOG_LEVEL;
    const internalAuth = serviceInternalAuth(logger, ADMIN_SERVICES.has(name));
    const metrics = await startProcessMetrics(logger);
    let bus: EventBus | undefined;
    try {
      bus = await NatsEventBus.connect(shared.NATS_URL, logger, { name, namespace: shared.NATS_NAMESPACE });
      const service = await start(config, bus, logger, { metrics: metrics.registry, internalAuth });
      const connected = bus;
      return {
        stop: async () => {
          await service.stop();
          await connected.close();
          await metrics.stop();
        },
      };
    } catch (error) {
      await bus?.close().catch(() => undefined);
      await metrics.stop().catch(() => undefined);
      throw error;
    }
  });
}

/**
 * A service binary's internal authentication from its env (a ConfigError when required and missing).
 * `adminRpcs`: the service has RPCs only the admin credential may call, so it needs GATEWAY_ADMIN_TOKEN.
 */
export function serviceInternalAuth(logger: Logger, adminRpcs: boolean): InternalAuth | undefined {
  const internalAuth = internalAuthFromEnv(loadConfig(internalAuthEnv), adminRpcs);
  if (!internalAuth) logger.warn('GATEWAY_INTERNAL_AUTH=off: internal gRPC calls are not authenticated');
  return internalAuth;
}
