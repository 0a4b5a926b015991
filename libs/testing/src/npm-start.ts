import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// `npm start` as a user runs it, for the tests that need the real entry point: `node apps/standalone/dist/main.js`
// (the root package.json's start script) as a child process in the repository root (needs the built dist),
// and its banner read back. Here, not in an app, so every app's tests can start the gateway as a process
// without importing the composition root (apps/standalone's own tests and apps/clients-test use it).
// It names the entry point's path, as a user's command line does; it imports no app.

export const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

export interface NpmStart {
  child: ChildProcess;
  /** Everything it wrote so far, stdout and stderr as they arrived. */
  output: () => string;
  /** Its exit code, once it exited. */
  exited: Promise<number | null>;
}

/** What the banner says: the edge's URL, the dev account's keys, gatewayctl's ledger address. */
export interface NpmStartBanner {
  url: string;
  apiKey: string;
  provisioningKey: string;
  accountId: string;
  ledgerAddress: string;
}

/**
 * Starts the entry point with PORT=0 (it binds a port of its own choosing and prints it: a port picked
 * here and bound later can be taken in between) and no environment but PATH and `env`.
 */
export function startNpmStart(env: Record<string, string> = {}): NpmStart {
  const child = spawn(process.execPath, ['apps/standalone/dist/main.js'], {
    cwd: repositoryRoot,
    env: { PATH: process.env.PATH ?? '', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const chunks: string[] = [];
  child.stdout!.on('data', (chunk: Buffer) => chunks.push(chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => chunks.push(chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => chunks.join(''), exited };
}

/** The banner's last line we read; the banner is written in one piece, so once it is out all of it is. */
const BANNER_END = /gatewayctl env:.*\n/;

/**
 * The banner once it is out (within `timeoutMs`); fails with everything the process wrote when it exits
 * first or the time runs out.
 */
export async function npmStartBanner(gateway: NpmStart, timeoutMs = 90_000): Promise<NpmStartBanner> {
  let ended = false;
  void gateway.exited.then(() => { ended = true; });
  const deadline = Date.now() + timeoutMs;
  while (!BANNER_END.test(gateway.output())) {
    if (ended || Date.now() > deadline) throw new Error(`gateway ${ended ? 'exited' : `not up after ${timeoutMs / 1000} s`}:\n${gateway.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const text = gateway.output();
  const field = (pattern: RegExp) => pattern.exec(text)![1]!;
  return {
    url: field(/listening on (http:\/\/\S+)/),
    apiKey: field(/API key: +(\S+)/),
    provisioningKey: field(/Provisioning key: +(\S+)/),
    accountId: field(/Dev account: +(\S+)/),
    ledgerAddress: field(/LEDGER_ADDR=(\S+)/),
  };
}
