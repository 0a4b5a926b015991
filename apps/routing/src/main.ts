import { join } from 'node:path';
import { z } from 'zod';
import { assertWritableDirectory, grpcAddress, runBusService } from '@gateway/platform';
import { startRoutingService } from './index.js';

await runBusService(
  'routing',
  {
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50054'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    // group-commit (default) or single: how usage events go to JetStream.
    USAGE_PUBLISHER: z.enum(['group-commit', 'single']).default('group-commit'),
    // One directory per process (it is locked; a restart on the same one replays it). Unset: one per
    // listen port under .data/usage-outbox/; "none" disables the durable outbox.
    USAGE_OUTBOX_DIR: z.string().optional(),
    // A stream's first usage checkpoint is written once it has run this long (stream-checkpoints.ts; shorter
    // streams never touch the disk: until their usage event is stored, the edge holds a copy of it).
    USAGE_CHECKPOINT_AFTER_MS: z.coerce.number().int().min(0).max(3_600_000).optional(),
    // GOAWAY after this (0: never), so clients re-resolve and new routing pods get calls; docs/running.md "Edge to routing: client-side balancing".
    ROUTING_MAX_CONNECTION_AGE_MS: z.coerce.number().int().min(0).default(300_000),
  },
  async (config, bus, logger, { metrics, internalAuth }) => {
    const outboxDirectory =
      config.USAGE_OUTBOX_DIR ?? join('.data', 'usage-outbox', `routing-${config.GRPC_LISTEN.replace(/[^A-Za-z0-9.-]+/g, '_')}`);
    // Checked before the first request: the outbox is written for every served request.
    if (outboxDirectory !== 'none') {
      await assertWritableDirectory(
        'USAGE_OUTBOX_DIR',
        outboxDirectory,
        `routing keeps undelivered usage there; ${config.USAGE_OUTBOX_DIR === undefined ? 'it is unset, so that is its default under the working directory; ' : ''}` +
          'give it a writable directory (a volume in a container)',
      );
    }
    return startRoutingService({
      listenAddress: config.GRPC_LISTEN,
      catalogAddress: config.CATALOG_ADDR,
      bus,
      logger,
      usage: {
        publisher: config.USAGE_PUBLISHER,
        ...(outboxDirectory === 'none' ? {} : { outboxDirectory }),
        ...(config.USAGE_CHECKPOINT_AFTER_MS === undefined ? {} : { checkpoints: { firstAfterMs: config.USAGE_CHECKPOINT_AFTER_MS } }),
      },
      metrics,
      internalAuth,
      maxConnectionAgeMs: config.ROUTING_MAX_CONNECTION_AGE_MS || undefined,
    });
  },
);
