import { runGatewayctl } from '@gateway/gatewayctl';
import type { RunningStack } from '../src/index.js';

/** What every whole-stack test shares: gatewayctl run in-process against the stack's gRPC addresses. */
export interface CtlResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function gatewayctl(stack: RunningStack, ...argv: string[]): Promise<CtlResult> {
  return gatewayctlAs(stack, undefined, ...argv);
}

/** gatewayctl carrying the operator's admin token (GATEWAY_ADMIN_TOKEN), for a stack with internal authentication. */
export async function gatewayctlAs(stack: RunningStack, adminToken: string | undefined, ...argv: string[]): Promise<CtlResult> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runGatewayctl(argv, {
    env: {
      AUTH_ADDR: stack.addresses.auth,
      LEDGER_ADDR: stack.addresses.ledger,
      CATALOG_ADDR: stack.addresses.catalog,
      JOBS_ADDR: stack.addresses.jobs,
      ...(adminToken === undefined ? {} : { GATEWAY_ADMIN_TOKEN: adminToken }),
    },
    stdout: (text) => out.push(text),
    stderr: (text) => err.push(text),
  });
  return { code, stdout: out.join(''), stderr: err.join('') };
}
