import { z } from 'zod';
import { grpcAddress, postgresUrl, runBusService } from '@gateway/platform';
import { startCatalogService } from './index.js';

await runBusService(
  'catalog',
  {
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50052'),
    DATABASE_URL: postgresUrl,
    // Empty counts as unset: no file, serve the version Postgres holds.
    GATEWAY_CONFIG: z.string().optional().transform((value) => value || undefined),
  },
  (config, bus, logger, { metrics, internalAuth }) =>
    startCatalogService({ listenAddress: config.GRPC_LISTEN, databaseUrl: config.DATABASE_URL, bus, logger, configPath: config.GATEWAY_CONFIG, metrics, internalAuth }),
);
