import { credentials, makeGenericClientConstructor, type ServiceDefinition, type ServiceError } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { CHANNEL_OPTIONS } from './client.js';

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

export interface HealthClient {
  /** grpc.health.v1.Health/Check of `service` ('' = the whole server). Rejects when the call fails. */
  check(service?: string, timeoutMs?: number): Promise<ServingStatus>;
  close(): void;
}

type RawHealthClient = {
  check(request: { service: string }, options: { deadline: number }, callback: (error: ServiceError | null, response?: { status: ServingStatus }) => void): void;
  close(): void;
};

const HealthClientConstructor = makeGenericClientConstructor(healthService as unknown as ServiceDefinition, 'Health');

/**
 * A client of a gateway service's gRPC health (grpc/server.ts), e.g. for the edge's readiness. The
 * channel options are createClient's (client.ts), so it shares that client's connection.
 */
export function createHealthClient(address: string): HealthClient {
  const raw = new HealthClientConstructor(address, credentials.createInsecure(), { ...CHANNEL_OPTIONS }) as unknown as RawHealthClient;
  return {
    check: (service = '', timeoutMs = 1_000) =>
      new Promise<ServingStatus>((resolve, reject) => {
        raw.check({ service }, { deadline: Date.now() + timeoutMs }, (error, response) => {
          if (error) reject(error);
          else resolve(response?.status ?? 'UNKNOWN');
        });
      }),
    close: () => raw.close(),
  };
}
