import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { natsUrl } from '@gateway/testing';

/** The machine's nats-server as it runs now: its executable and arguments, read from /proc. */
export interface NatsServerProcess {
  pid: number;
  argv: string[];
  host: string;
  port: number;
}

/**
 * Finds the local nats-server the tests use, or explains why it cannot be restarted from here
 * (another host, no process visible): the chaos test then says so instead of restarting it.
 */
export function findLocalNatsServer(): NatsServerProcess | string {
  const url = new URL(natsUrl.includes('://') ? natsUrl : `nats://${natsUrl}`);
  if (!['127.0.0.1', 'localhost'].includes(url.hostname)) return `NATS_URL ${natsUrl} is not local`;
  let pids: number[];
  try {
    pids = execFileSync('pidof', ['nats-server'], { encoding: 'utf8' }).trim().split(/\s+/).map(Number);
  } catch {
    return 'no nats-server process found';
  }
  if (pids.length !== 1) return `expected one nats-server process, found ${pids.length}`;
  const argv = readFileSync(`/proc/${pids[0]}/cmdline`, 'utf8').split('\0').filter(Boolean);
  return { pid: pids[0]!, argv, host: url.hostname, port: Number(url.port || 4222) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function portOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}

function alive(pid: number): boolean {
  return existsSync(`/proc/${pid}`) && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
}

/** Starts nats-server with the arguments it had (the same command .ci/run uses) and waits for its port. */
export async function startNatsServer(server: NatsServerProcess): Promise<void> {
  if (await portOpen(server.host, server.port)) return;
  const [executable, ...args] = server.argv;
  if (existsSync('/usr/sbin/start-stop-daemon') || existsSync('/sbin/start-stop-daemon')) {
    execFileSync('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', executable!, '--', ...args]);
  } else {
    spawn(executable!, args, { detached: true, stdio: 'ignore' }).unref();
  }
  const deadline = Date.now() + 15_000;
  while (!(await portOpen(server.host, server.port))) {
    if (Date.now() > deadline) throw new Error('nats-server did not come back within 15 s');
    await sleep(20);
  }
}

/**
 * Stops the machine's nats-server (SIGTERM: JetStream flushes its file store) and starts it again
 * with the same arguments. Always starts it again, whatever failed in between.
 */
export async function restartNatsServer(server: NatsServerProcess): Promise<{ outageMs: number }> {
  const stoppedAt = Date.now();
  try {
    process.kill(server.pid, 'SIGTERM');
    const deadline = Date.now() + 5_000;
    while (alive(server.pid)) {
      if (Date.now() > deadline) { process.kill(server.pid, 'SIGKILL'); break; }
      await sleep(10);
    }
    while (Date.now() < deadline + 2_000 && (await portOpen(server.host, server.port))) await sleep(10);
  } finally {
    await startNatsServer(server);
  }
  return { outageMs: Date.now() - stoppedAt };
}
