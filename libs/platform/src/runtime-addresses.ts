import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { grpcAddress } from './config.js';

/**
 * Where a running single-process gateway (`npm start`) tells operator tools its service addresses, so
 * `gatewayctl` works against it with no ports copied by hand: `<data dir>/addresses.json`, written once
 * the services listen (their ports are free ports, new on every start) and removed at an orderly stop.
 * After a crash the file names ports nobody listens on: a tool then reports the address it could not reach.
 */
export const RUNTIME_ADDRESSES_FILE = 'addresses.json';

const runtimeAddresses = z.strictObject({
  auth: grpcAddress,
  ledger: grpcAddress,
  catalog: grpcAddress,
  /** The jobs service (files, batches); absent in files written before it existed. */
  jobs: grpcAddress.optional(),
  /** The edge's base URL, for people reading the file. */
  edge: z.string(),
  /** The gateway process that wrote it. */
  pid: z.number().int().positive(),
});

export type RuntimeAddresses = z.infer<typeof runtimeAddresses>;

/** Writes the file whole (a reader never sees half of it), readable by its owner only. */
export function writeRuntimeAddresses(dataDir: string, addresses: RuntimeAddresses): void {
  const path = join(dataDir, RUNTIME_ADDRESSES_FILE);
  writeFileSync(`${path}.tmp`, `${JSON.stringify(addresses, null, 2)}\n`, { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

export function removeRuntimeAddresses(dataDir: string): void {
  rmSync(join(dataDir, RUNTIME_ADDRESSES_FILE), { force: true });
}

/** The file's addresses; undefined when there is none. A file that is not what this module writes is an error naming it. */
export function readRuntimeAddresses(dataDir: string): RuntimeAddresses | undefined {
  const path = join(dataDir, RUNTIME_ADDRESSES_FILE);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error(`${path} is not JSON`);
  }
  const result = runtimeAddresses.safeParse(parsed);
  if (!result.success) throw new Error(`${path} is not a gateway addresses file: ${result.error.issues[0]?.message ?? 'invalid'}`);
  return result.data;
}

/**
 * The admin credential of a single-process gateway (`npm start`), kept in its data dir (owner-only) so
 * `gatewayctl` run by the same user finds it like the addresses.
 */
export const ADMIN_TOKEN_FILE = 'admin-token';

/** The data dir's admin token; undefined when the file is absent. */
export function readAdminToken(dataDir: string): string | undefined {
  try {
    const token = readFileSync(join(dataDir, ADMIN_TOKEN_FILE), 'utf8').trim();
    return token === '' ? undefined : token;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}
