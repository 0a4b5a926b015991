import { z } from 'zod';
import { grpcAddress, postgresUrl, runBusService } from '@gateway/platform';
import { startAuthService } from './index.js';

await runBusService(
  'auth',
  {
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50051'),
    DATABASE_URL: postgresUrl,
    KEY_HASH_SECRET: z.string().min(32, 'must be at least 32 characters'),
  },
  (config, bus, logger, { metrics, internalAuth }) =>
    startAuthService({ listenAddress: config.GRPC_LISTEN, databaseUrl: config.DATABASE_URL, bus, logger, keyHashSecret: config.KEY_HASH_SECRET, metrics, internalAuth }),
);
