import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * How the bench's own child servers (fake upstream, bare proxy) run: listen on a free loopback port,
 * announce it as `{"ready":true,"port":N}` on stdout for BenchChild, and stop on SIGTERM/SIGINT,
 * cutting open connections after 2 s at most.
 */
export function serveUntilSignalled(server: Server): void {
  server.maxRequestsPerSocket = 0;
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write(`${JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port })}\n`);
  });
  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 2_000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
