import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { busCheck, ConfigError, startGrpcServer, type EventBus, type Logger, type Registry, type InternalAuth } from '@gateway/platform';
import { postgresCheck } from '@gateway/platform/db';
import { CatalogServiceService } from '@gateway/proto';
import { iconSourceFor } from './catalog-data.js';
import { CatalogService } from './catalog-service.js';
import { CatalogStore } from './catalog-store.js';
import { catalogHandlers } from './grpc-handlers.js';

export { HIDDEN_PARAMETERS } from './catalog-snapshot.js';

export interface CatalogServiceOptions {
  /** host:port; port 0 picks a free one. */
  listenAddress: string;
  databaseUrl: string;
  bus: EventBus;
  logger: Logger;
  /** Config file loaded at start; a file with problems is a start-up error listing them. */
  configPath?: string;
  /** The process's metrics registry (Postgres pool, dependency health). */
  metrics?: Registry;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
}

export interface RunningCatalogService {
  address: string;
  stop(): Promise<void>;
}

export async function startCatalogService(options: CatalogServiceOptions): Promise<RunningCatalogService> {
  const store = await CatalogStore.open(options.databaseUrl, options.logger, options.metrics);
  let service: CatalogService | undefined;
  try {
    service = await CatalogService.open(store, options.bus, options.logger);
    if (options.configPath !== undefined) {
      const path = resolve(options.configPath);
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (error) {
        throw new ConfigError([`GATEWAY_CONFIG: cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`]);
      }
      const result = await service.load(text, path, iconSourceFor(path));
      if (result.problems.length > 0) {
        throw new ConfigError(result.problems.map((problem) => `${path}: ${problem.path}: ${problem.reason}`));
      }
    }
    const server = await startGrpcServer({
    credentials: options.internalAuth?.accepted,
      address: options.listenAddress,
      services: [
        { definition: CatalogServiceService, implementation: catalogHandlers(service, options.logger), name: 'gateway.v1.CatalogService' },
      ],
      logger: options.logger,
      // LoadCatalog carries a whole catalog config.
      maxReceiveMessageBytes: 16 * 1024 * 1024,
      dependencies: [postgresCheck(options.databaseUrl, 'catalog'), busCheck(options.bus)],
      ...(options.metrics ? { metrics: options.metrics } : {}),
    });
    const running = service;
    return {
      address: server.address,
      stop: async () => {
        await server.stop();
        await running.close();
        await store.close();
      },
    };
  } catch (error) {
    await service?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    throw error;
  }
}
