import { runGatewayctlProcess, type GatewayctlResult } from '../src/bench/gatewayctl-process.js';
import type { RunningStack } from '../src/index.js';

/**
 * What every whole-stack test shares: gatewayctl run as an operator runs it — its bin in a process of its
 * own, configured by env only — against the stack's gRPC addresses (no test loads the CLI's code).
 */
export type CtlResult = GatewayctlResult;

/** The env gatewayctl reads: the services' addresses, and the operator's admin token when the stack checks one. */
export function gatewayctlEnv(addresses: Pick<RunningStack['addresses'], 'auth' | 'ledger' | 'catalog'> & { jobs?: string }, adminToken?: string): Record<string, string> {
  return {
    AUTH_ADDR: addresses.auth,
    LEDGER_ADDR: addresses.ledger,
    CATALOG_ADDR: addresses.catalog,
    ...(addresses.jobs === undefined ? {} : { JOBS_ADDR: addresses.jobs }),
    ...(adminToken === undefined ? {} : { GATEWAY_ADMIN_TOKEN: adminToken }),
  };
}

export function gatewayctl(stack: RunningStack, ...argv: string[]): Promise<CtlResult> {
  return gatewayctlAs(stack, undefined, ...argv);
}

/** gatewayctl carrying the operator's admin token (GATEWAY_ADMIN_TOKEN), for a stack with internal authentication. */
export function gatewayctlAs(stack: RunningStack, adminToken: string | undefined, ...argv: string[]): Promise<CtlResult> {
  return runGatewayctlProcess(argv, gatewayctlEnv(stack.addresses, adminToken));
}
