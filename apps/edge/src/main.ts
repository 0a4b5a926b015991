import { z } from 'zod';
import { grpcAddress, runBusService } from '@gateway/platform';
import { startEdge } from './index.js';

await runBusService(
  'edge',
  {
    PORT: z.coerce.number().int().min(0).max(65_535).default(8080),
    HOST: z.string().min(1).default('0.0.0.0'),
    AUTH_ADDR: grpcAddress.default('127.0.0.1:50051'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    LEDGER_ADDR: grpcAddress.default('127.0.0.1:50053'),
    ROUTER_ADDR: grpcAddress.default('127.0.0.1:50054'),
    MEDIA_ADDR: grpcAddress.default('127.0.0.1:50055'),
    /** 'leased' (default): leased budgets (DESIGN §2); 'ledger': one Ledger.Admit per request. */
    EDGE_ADMISSION: z.enum(['ledger', 'leased']).default('leased'),
    /** 'exchange' (default): chat requests as frames of one long-lived Router.Exchange call; 'calls': a gRPC call each. */
    EDGE_ROUTER_TRANSPORT: z.enum(['exchange', 'calls']).default('exchange'),
  },
  (config, bus, logger) =>
    startEdge({
      host: config.HOST,
      port: config.PORT,
      authAddress: config.AUTH_ADDR,
      catalogAddress: config.CATALOG_ADDR,
      ledgerAddress: config.LEDGER_ADDR,
      routerAddress: config.ROUTER_ADDR,
      mediaAddress: config.MEDIA_ADDR,
      admission: config.EDGE_ADMISSION,
      routerTransport: config.EDGE_ROUTER_TRANSPORT,
      bus,
      logger,
    }),
);
