import { Pool } from 'undici';

/** Keep-alive connections per provider origin unless the adapter is told otherwise. */
const DEFAULT_CONNECTIONS = 128;

/** The connection pool of one provider origin, as every HTTP adapter configures it. */
export function createProviderPool(origin: string, connections = DEFAULT_CONNECTIONS): Pool {
  return new Pool(origin, {
    connections,
    keepAliveTimeout: 30_000,
    // Timeouts are the router's (per attempt, via the signal); undici's defaults of 300 s would outlive them anyway.
    headersTimeout: 0,
    bodyTimeout: 0,
  });
}
