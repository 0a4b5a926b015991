import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../embedded-postgres.js';
import { BenchChild } from './child-processes.js';
import { runGatewayctlProcess } from './gatewayctl-process.js';
import { benchConfigYaml } from './gateway-cluster.js';
import { processTree, type ProcessGroup } from './proc-stat.js';

/**
 * The other things `npm run bench` can put beside the bare proxy and the multi-process gateway, each in
 * front of the same fake upstream: the gateway as `npm start` runs it (one process, embedded Postgres,
 * in-process bus), and a peer gateway installed from npm (Portkey's open-source gateway).
 */

/** What the bench sends load to and measures. */
export interface MeasuredTarget {
  name: string;
  origin: string;
  /** One per account; requests use them in turn. */
  apiKeys: string[];
  /** Sent with every request besides content-type and authorization (a peer's routing headers). */
  headers?: Record<string, string>;
  /** Processes whose CPU and memory are the target's cost. */
  groups(): Promise<ProcessGroup[]>;
}

export interface ExtraTarget extends MeasuredTarget {
  stop(): Promise<void>;
}

/** `npm start` on a fresh data dir (embedded Postgres), serving the bench's model; its dev key does the requests. */
/**
 * The node flags of package.json's start script (a test keeps the two equal): the image's (deploy/Dockerfile:
 * --single-threaded-gc, --no-memory-reducer) and the edge's own, a 16 MiB semi-space and full collections
 * once the old space grows by half its live size. One process holds every service; with the 32 MiB
 * semi-space it had before, its node process read 169–195 MB under load, with these 129–184 MB
 * (docs/performance.md).
 */
export const NPM_START_NODE_FLAGS: readonly string[] = ['--single-threaded-gc', '--no-memory-reducer', '--max-semi-space-size=16', '--heap-growing-percent=50'];

/**
 * The environment package.json's start script sets before node starts, the image's (deploy/Dockerfile):
 * glibc gives every freed block of 128 KiB or more back to the system, so a burst of large uploads does
 * not stay resident (docs/performance.md, "npm start's memory").
 */
export const NPM_START_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: '131072' };

function npmStartNodeFlags(): readonly string[] {
  const chosen = process.env.BENCH_NODE_FLAGS_NPM_START ?? process.env.BENCH_NODE_FLAGS;
  return chosen !== undefined ? chosen.split(' ').filter(Boolean) : NPM_START_NODE_FLAGS;
}

export async function startNpmStartTarget(root: string, upstreamBaseUrl: string): Promise<ExtraTarget> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-npm-start-'));
  // The embedded Postgres runs as the 'postgres' user when we are root: it must be able to enter the directory.
  chmodSync(dataDir, 0o755);
  const configPath = join(dataDir, 'bench-config.yaml');
  writeFileSync(configPath, benchConfigYaml(upstreamBaseUrl));
  const port = await freePort();
  // The command line of `npm start` (package.json), without npm in front.
  const child = new BenchChild('npm-start', {
    // package.json's start script, or BENCH_NODE_FLAGS_NPM_START (else BENCH_NODE_FLAGS, as the cluster's
    // services) to try other runtime settings.
    args: [...npmStartNodeFlags(), 'apps/standalone/dist/main.js'],
    cwd: root,
    env: {
      ...NPM_START_ENV, PATH: process.env.PATH ?? '', GATEWAY_DATA_DIR: join(dataDir, 'data'), GATEWAY_CONFIG: configPath, PORT: String(port), HOST: '127.0.0.1',
      BENCH_UPSTREAM_API_KEY: 'bench-upstream-key', LOG_LEVEL: 'warn',
    },
  });
  try {
    const origin = (await child.waitForLine(/listening on (http:\/\/\S+)/, 120_000))[1]!;
    const apiKey = (await child.waitForLine(/API key:\s+(\S+)/, 10_000))[1]!;
    // The dev account's 10 credits cover the bench's charges but not the holds of ~2,000 requests in
    // flight (each holds at least 0.05 credits): top it up like the cluster's accounts (gatewayctl finds
    // the addresses and the admin credential in the data dir).
    const accountId = (await child.waitForLine(/Dev account:\s+(acc_\S+)/, 10_000))[1]!;
    const topUp = await runGatewayctlProcess(['accounts', 'top-up', accountId, '--credits', '1000000'], { GATEWAY_DATA_DIR: join(dataDir, 'data') });
    if (topUp.code !== 0) throw new Error(`gatewayctl top-up of the npm start dev account failed: ${topUp.stderr}${topUp.stdout}`);
    return {
      name: 'npm start',
      origin,
      apiKeys: [apiKey],
      // The node process and everything it started (the embedded Postgres and its backends).
      groups: async () => [
        { name: 'npm start (node)', pids: [child.pid] },
        { name: 'npm start (postgres)', pids: processTree(child.pid).filter((pid) => pid !== child.pid) },
      ],
      stop: async () => {
        await child.stop(15_000);
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await child.stop(5_000);
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/** The peer gateways `--peer` knows, and how each is installed and started. */
export const PEERS = {
  portkey: { package: '@portkey-ai/gateway', version: '1.15.2', bin: 'build/start-server.js' },
} as const;
export type PeerName = keyof typeof PEERS;

/**
 * Portkey's gateway from npm, installed once into `<root>/.data/bench-peers/portkey` (not a dependency
 * of ours), run `--headless` on a free port, told per request to call the bench's upstream as an
 * OpenAI-compatible provider (`x-portkey-provider: openai`, `x-portkey-custom-host`).
 */
export async function startPeer(name: PeerName, root: string, upstreamBaseUrl: string, log: (text: string) => void): Promise<ExtraTarget> {
  const peer = PEERS[name];
  const prefix = join(root, '.data', 'bench-peers', name);
  const main = join(prefix, 'node_modules', peer.package, peer.bin);
  if (!existsSync(main)) {
    log(`installing ${peer.package}@${peer.version} into ${prefix} (npm, once)`);
    mkdirSync(prefix, { recursive: true });
    writeFileSync(join(prefix, 'package.json'), JSON.stringify({ name: `bench-peer-${name}`, private: true }));
    await promisify(execFile)('npm', ['install', '--no-audit', '--no-fund', '--omit=dev', `${peer.package}@${peer.version}`], { cwd: prefix, maxBuffer: 16 * 1024 * 1024 });
  }
  const port = await freePort();
  const child = new BenchChild(name, { args: [main, '--headless', `--port=${port}`], cwd: prefix, env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production' } });
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.process.exitCode !== null) throw new Error(`${name} exited (${child.process.exitCode})\n${child.logs()}`);
    const up = await fetch(origin).then(() => true, () => false);
    if (up) break;
    if (Date.now() > deadline) {
      await child.stop(3_000);
      throw new Error(`${name} did not listen on ${origin} within 60 s\n${child.logs()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return {
    name,
    origin,
    apiKeys: ['bench-upstream-key'],
    headers: { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstreamBaseUrl },
    groups: async () => [{ name, pids: processTree(child.pid) }],
    stop: async () => { await child.stop(5_000); },
  };
}
