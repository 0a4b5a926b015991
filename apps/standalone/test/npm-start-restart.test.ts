import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import { accessSync, appendFileSync, chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import pg from 'pg';
import { eventually, labelValues, npmStartBanner, parsePrometheusText, repositoryRoot, sampleSum, startNpmStart, type NpmStart } from '@gateway/testing';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import { embeddedPostgresBinaries, freePort } from '../src/embedded-postgres.js';
import { liveProcess, waitForExit } from '../src/process-identity.js';
import { stopProcessesMentioning } from './leftover-processes.js';

// `npm start` as a user runs it: `node apps/standalone/dist/main.js` as a child process with its own data
// dir (embedded Postgres, real binaries), default LOG_LEVEL, PORT=0. Covers what a crash leaves behind,
// a second start on a live data dir, start failures printing their cause, a data dir the `postgres`
// user cannot reach, and the generated superuser password. Needs the built dist (npm run build).
const asRoot = process.getuid?.() === 0;
const hasDeathSignal = process.platform === 'linux' && spawnSync('setpriv', ['--help'], { stdio: 'ignore' }).status === 0;

describe('npm start: crash recovery, one gateway per data dir, start failures, generated password', () => {
  // Searchable by the `postgres` user (mkdtemp makes 0700; that case has its own test below).
  const root = mkdtempSync(join(tmpdir(), 'npm-start-'));
  chmodSync(root, 0o755);
  const dataDir = join(root, 'data');
  const databaseDir = join(dataDir, 'postgres');
  const passwordFile = join(dataDir, 'postgres-password');
  const spawned: ChildProcess[] = [];
  let apiKey = '';
  let first: NpmStart;

  const start = (env: Record<string, string> = {}): NpmStart => {
    const gateway = startNpmStart({ GATEWAY_DATA_DIR: dataDir, ...env });
    spawned.push(gateway.child);
    return gateway;
  };

  /** The edge URL once the banner is out. */
  const listening = async (gateway: NpmStart): Promise<string> => (await npmStartBanner(gateway)).url;

  const chat = async (url: string) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hello' }] });
    return completion.choices[0]?.message.content;
  };

  const stopCleanly = async (gateway: NpmStart) => {
    gateway.child.kill('SIGTERM');
    return gateway.exited;
  };

  const postmaster = () => {
    const lines = readFileSync(join(databaseDir, 'postmaster.pid'), 'utf8').split('\n');
    return { pid: Number(lines[0]), port: Number(lines[3]) };
  };

  const connectAs = async (port: number, password: string) => {
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'gateway' });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };

  const postgresUser = () => (asRoot
    ? { uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })) }
    : {});

  beforeAll(() => {
    // The whole file is one gateway's life on one data dir; without the build there is nothing to run.
    accessSync(join(repositoryRoot, 'apps/standalone/dist/main.js'));
  });

  afterAll(async () => {
    for (const child of spawned) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    // Whatever Postgres these tests started or left (the orphan included) is found by its data dir.
    await stopProcessesMentioning(databaseDir);
    rmSync(root, { recursive: true, force: true });
  }, 60_000);

  it('first start: answers a chat request; the superuser password is generated, 0600, never printed; one /metrics for every service', async () => {
    const metricsPort = await freePort();
    const gateway = start({ METRICS_PORT: String(metricsPort) });
    const url = await listening(gateway);
    apiKey = /API key:\s+(\S+)/.exec(gateway.output())![1]!;
    expect(await chat(url)).toBeTruthy();
    // Every service of the process on one registry, served where the banner says.
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    expect(gateway.output()).toContain(`Metrics:           ${metricsUrl}`);
    const samples = parsePrometheusText(await (await fetch(metricsUrl)).text());
    expect(sampleSum(samples, 'gateway_http_requests_total', { route: '/v1/chat/completions', status: '200' })).toBe(1);
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { outcome: 'success' })).toBe(1);
    expect(labelValues(samples, 'gateway_db_pool_connections', 'pool')).toEqual(['auth', 'catalog', 'jobs', 'ledger', 'media']);

    const password = readFileSync(passwordFile, 'utf8').trim();
    expect(password).toMatch(/^[0-9a-f]{48}$/);
    expect(statSync(passwordFile).mode & 0o777).toBe(0o600);
    expect(gateway.output()).not.toContain(password);
    const { port } = postmaster();
    await expect(connectAs(port, 'gateway-dev')).rejects.toMatchObject({ code: '28P01' });
    const client = await connectAs(port, password);
    await client.end();
    // Postgres listens on loopback TCP only: no Unix socket another local user could try.
    expect(readdirSync(tmpdir()).filter((name) => name === `.s.PGSQL.${port}`)).toEqual([]);
    first = gateway;
  }, 120_000);

  it('a second start on the same data dir refuses in one line and leaves the running one alone', async () => {
    const before = postmaster();
    const second = start();
    expect(await second.exited).toBe(1);
    expect(second.output().trim()).toBe(`gateway: another gateway is running on this data dir (pid ${first.child.pid})`);
    expect(postmaster()).toEqual(before);
    expect(liveProcess(before.pid)).toBeDefined();
    expect(await chat(/listening on (http:\/\/\S+)/.exec(first.output())![1]!)).toBeTruthy();
  }, 60_000);

  it('after SIGKILL of the gateway, the next start comes up cleanly and answers', async () => {
    const { pid } = postmaster();
    first.child.kill('SIGKILL');
    await first.exited;
    // With setpriv the kernel hands the postmaster SIGINT when the gateway dies (fast shutdown).
    if (hasDeathSignal) expect(await waitForExit(pid, 20_000)).toBe(true);

    const again = start();
    const url = await listening(again);
    expect(await chat(url)).toBeTruthy();
    expect(postmaster().pid).not.toBe(pid);
    // gatewayctl reaches this run through the data dir's addresses.json, no ports copied (the crashed
    // run's file named ports nobody listens on any more: the new run rewrote it).
    const accountId = /Dev account:\s+(\S+)/.exec(again.output())![1]!;
    const shown = await runGatewayctlProcess(['accounts', 'show', accountId, '--json'], { GATEWAY_DATA_DIR: dataDir });
    expect(shown.code, shown.stdout + shown.stderr).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ account_id: accountId });
    expect(await stopCleanly(again)).toBe(0);
    expect(existsSync(join(databaseDir, 'postmaster.pid'))).toBe(false);
    expect(existsSync(join(dataDir, 'gateway.pid'))).toBe(false);
    expect(existsSync(join(dataDir, 'addresses.json'))).toBe(false);
  }, 120_000);

  it('a postmaster a crashed run left running (no death signal) is stopped, and the old fixed password replaced', async () => {
    // What a gateway before the death signal (or on a system without setpriv) left after SIGKILL: a
    // postmaster on the data dir whose parent is gone. Started through a shell that exits at once.
    const { postgres } = await embeddedPostgresBinaries();
    const port = await freePort();
    spawn('/bin/sh', ['-c', '"$@" >/dev/null 2>&1 &', 'sh', postgres, '-D', databaseDir, '-p', String(port),
      '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='], { ...postgresUser(), detached: true, stdio: 'ignore' }).unref();
    const password = readFileSync(passwordFile, 'utf8').trim();
    const client = await eventually(() => connectAs(port, password), 30_000, 100);
    // ...and a data dir from before generated passwords: the fixed one, no password file.
    await client.query(`ALTER ROLE postgres PASSWORD 'gateway-dev'`);
    await client.end();
    unlinkSync(passwordFile);
    const orphan = postmaster();
    expect(orphan.port).toBe(port);
    expect(liveProcess(orphan.pid)?.parentPid).not.toBe(process.pid);

    const gateway = start();
    const url = await listening(gateway);
    expect(gateway.output()).toContain(`Stopping the embedded PostgreSQL a previous run left running (pid ${orphan.pid})`);
    expect(gateway.output()).toContain(`Replaced the embedded PostgreSQL's former fixed password with a generated one (kept in ${passwordFile})`);
    expect(liveProcess(orphan.pid)).toBeUndefined();
    expect(await chat(url)).toBeTruthy();

    const generated = readFileSync(passwordFile, 'utf8').trim();
    expect(generated).toMatch(/^[0-9a-f]{48}$/);
    expect(generated).not.toBe(password);
    expect(gateway.output()).not.toContain(generated);
    await expect(connectAs(postmaster().port, 'gateway-dev')).rejects.toMatchObject({ code: '28P01' });
    expect(await stopCleanly(gateway)).toBe(0);
  }, 120_000);

  it('a stale postmaster.pid naming a live process that is not Postgres is cleared', async () => {
    // This test process stands in for an unrelated program that got the crashed postmaster's pid.
    writeFileSync(join(databaseDir, 'postmaster.pid'), `${process.pid}\n${databaseDir}\n0\n5999\n\n127.0.0.1\n0 0\nready\n`);
    const gateway = start();
    const url = await listening(gateway);
    expect(await chat(url)).toBeTruthy();
    expect(liveProcess(process.pid)).toBeDefined();
    expect(await stopCleanly(gateway)).toBe(0);
  }, 120_000);

  it('a start failure prints its cause at the default log level', async () => {
    const configFile = join(databaseDir, 'postgresql.conf');
    const original = readFileSync(configFile, 'utf8');
    appendFileSync(configFile, 'this is not a setting\n');
    try {
      const broken = start();
      expect(await broken.exited).toBe(1);
      expect(broken.output()).toContain(`gateway: the embedded PostgreSQL in ${databaseDir} exited during start-up (exit code 1); its last log lines:`);
      expect(broken.output()).toMatch(/syntax error in file ".*postgresql\.conf" line \d+/);
    } finally {
      writeFileSync(configFile, original);
    }
    expect(existsSync(join(dataDir, 'gateway.pid'))).toBe(false);

    const missingConfig = start({ GATEWAY_CONFIG: join(root, 'no-such-config.yaml') });
    expect(await missingConfig.exited).toBe(1);
    expect(missingConfig.output()).toContain(`gateway failed to start: GATEWAY_CONFIG: no such file ${join(root, 'no-such-config.yaml')}`);
  }, 60_000);

  it.skipIf(!asRoot)('as root, a data dir under a 0700 directory stops with one line naming the directory to fix', async () => {
    const privateDir = mkdtempSync(join(tmpdir(), 'npm-start-private-'));
    try {
      expect(statSync(privateDir).mode & 0o777).toBe(0o700);
      const gateway = start({ GATEWAY_DATA_DIR: join(privateDir, 'data') });
      expect(await gateway.exited).toBe(1);
      expect(gateway.output().trim()).toBe(
        `gateway: the 'postgres' system user (the embedded PostgreSQL runs as it, since Postgres refuses root) cannot enter ${privateDir} (mode 0700)` +
          ` on the way to ${join(privateDir, 'data')}: run 'chmod o+x ${privateDir}' or set GATEWAY_DATA_DIR to a directory outside it`,
      );
    } finally {
      rmSync(privateDir, { recursive: true, force: true });
    }
  }, 30_000);
});
