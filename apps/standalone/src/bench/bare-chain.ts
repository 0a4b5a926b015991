import { join } from 'node:path';
import { BenchChild } from './child-processes.js';
import type { ExtraTarget } from './peers.js';

/**
 * Two bare proxies in series, the client's in front of one that reaches the upstream: what a second
 * process on the path costs with no logic in either (no parsing, admission, metering or settlement).
 * The gateway's edge and routing are two such processes (DESIGN §1, a gRPC hop between them), so this
 * target's CPU per request and per frame is the floor under the gateway's ratios to the single bare
 * proxy (`--bare-chain`; docs/performance.md).
 *
 * `benchDir` holds the built `bare-proxy-process.js`; `cwd` is where the children run.
 */
export async function startBareChain(upstreamOrigin: string, benchDir: string, cwd: string): Promise<ExtraTarget> {
  const start = async (name: string, next: string) => {
    const child = new BenchChild(name, { args: [join(benchDir, 'bare-proxy-process.js'), next], cwd, env: { PATH: process.env.PATH ?? '' } });
    try {
      const { port } = await child.waitFor((event) => event.ready === true, 30_000);
      return { child, origin: `http://127.0.0.1:${Number(port)}` };
    } catch (error) {
      await child.stop();
      throw error;
    }
  };
  const inner = await start('bare-chain-inner', upstreamOrigin);
  const outer = await start('bare-chain-outer', inner.origin).catch(async (error: unknown) => {
    await inner.child.stop();
    throw error;
  });
  return {
    name: 'bare chain',
    origin: outer.origin,
    apiKeys: ['bench'],
    groups: async () => [{ name: 'bare-outer', pids: [outer.child.pid] }, { name: 'bare-inner', pids: [inner.child.pid] }],
    stop: async () => {
      await Promise.all([outer.child.stop(), inner.child.stop()]);
    },
  };
}
