import { Pool } from 'undici';

/**
 * Keep-alive connections per provider origin unless the adapter is told otherwise. An HTTP/1.1 upstream
 * carries one request per connection, and a stream holds its connection for its whole length, so this is
 * also the number of streams one routing process can have open to one provider origin: a request beyond
 * it waits in the pool for a stream to end. 128 held issue 39's 512 concurrent streams to a quarter (the
 * rest queued for seconds before their first byte); 1,024 leaves room for them, and stays a bound (each
 * idle connection is a socket closed after keepAliveTimeout).
 */
export const DEFAULT_PROVIDER_CONNECTIONS = 1_024;

/** The connection pool of one provider origin, as every HTTP adapter configures it. */
export function createProviderPool(origin: string, connections = DEFAULT_PROVIDER_CONNECTIONS): Pool {
  return new Pool(origin, {
    connections,
    keepAliveTimeout: 30_000,
    // Timeouts are the router's (per attempt, via the signal); undici's defaults of 300 s would outlive them anyway.
    headersTimeout: 0,
    bodyTimeout: 0,
  });
}
