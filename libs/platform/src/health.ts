import type { EventBus } from './bus/index.js';

/**
 * One dependency a service cannot serve without (Postgres, NATS). gRPC health (grpc/server.ts) runs
 * every check periodically and answers NOT_SERVING while any fails, so a load balancer or kubelet
 * takes the replica out instead of sending it requests that can only fail.
 */
export interface DependencyCheck {
  /** Short name in logs and the `gateway_dependency_up` metric: postgres, nats. */
  readonly name: string;
  /** Resolves when the dependency answers; rejects when it does not (the caller bounds the time). */
  check(): Promise<void>;
  /** Frees what the check holds (its connection). */
  close?(): Promise<void>;
}

/** The event bus is connected (a NATS connection that is reconnecting is not). */
export function busCheck(bus: EventBus): DependencyCheck {
  return {
    name: 'nats',
    async check() {
      if (bus.isConnected !== undefined && !bus.isConnected()) throw new Error('not connected to the event bus');
    },
  };
}
