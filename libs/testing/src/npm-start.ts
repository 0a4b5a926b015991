import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// `npm start` as a user runs it, for the tests that need the real entry point: `node apps/standalone/dist/main.js`
// (the root package.json's start script) as a child process in the repository root (needs the built dist),
// and its banner read back. Here, not in an app, so every app's tests can start the gateway as a process
// without importing the composition root (apps/standalone's own tests and apps/clients-test use it).
// It names the entry point's path, as a user's command line does; it imports no app.

export const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** The parts of the root package.json's start script: `VAR=value … sh scripts/node-major.sh node <flags> <entry>`. */
export interface NpmStartScript {
  /** The environment the script sets before node starts (glibc reads MALLOC_MMAP_THRESHOLD_ at exec). */
  env: Record<string, string>;
  /** The node flags before the entry point. */
  nodeFlags: string[];
  entry: string;
}

/** The start script read from package.json (throws when it no longer has that shape). */
export function npmStartScript(): NpmStartScript {
  const script = (JSON.parse(readFileSync(`${repositoryRoot}package.json`, 'utf8')) as { scripts: { start: string } }).scripts.start;
  const words = script.split(' ').filter(Boolean);
  const env: Record<string, string> = {};
  while (words.length > 0 && /^[A-Z_][A-Z0-9_]*=/.test(words[0]!)) {
    const word = words.shift()!;
    env[word.slice(0, word.indexOf('='))] = word.slice(word.indexOf('=') + 1);
  }
  if (words[0] !== 'sh' || words[1] !== 'scripts/node-major.sh' || words[2] !== 'node') throw new Error(`unexpected start script: ${script}`);
  return { env, nodeFlags: words.slice(3, -1), entry: words.at(-1)! };
}

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
 * Starts the entry point as the start script does (its environment and node flags) with PORT=0 (it binds
 * a port of its own choosing and prints it: a port picked here and bound later can be taken in between)
 * and no other environment but PATH and `env`.
 */
export function startNpmStart(env: Record<string, string> = {}): NpmStart {
  // The start script's own environment and node flags, as `npm start` runs it.
  const script = npmStartScript();
  const child = spawn(process.execPath, [...script.nodeFlags, script.entry], {
    cwd: repositoryRoot,
    env: { PATH: process.env.PATH ?? '', PORT: '0', ...script.env, ...env },
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
