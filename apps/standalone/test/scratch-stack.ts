import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestBus, createTestDatabase, type TestBus, type TestDatabase } from '@gateway/testing';

/** A stack started by `onScratchDatabase`, with what it was started on. */
export interface ScratchStack<S> {
  stack: S;
  database: TestDatabase;
  testBus: TestBus;
  /** Stops the stack, drops its database and NATS namespace, removes the catalog file. */
  stop(): Promise<void>;
}

/**
 * Starts a stack (in-process or as processes: `start` decides) on a fresh test database and NATS
 * namespace, with the catalog `configYaml` written to a temp file whose path `start` is given.
 * A failed start cleans up what it made.
 */
export async function onScratchDatabase<S extends { stop(): Promise<void> }>(
  name: string,
  configYaml: string,
  start: (database: TestDatabase, testBus: TestBus, configPath: string) => Promise<S>,
): Promise<ScratchStack<S>> {
  const directory = await mkdtemp(join(tmpdir(), `gateway-${name}-e2e-`));
  let database: TestDatabase | undefined;
  let testBus: TestBus | undefined;
  let stack: S | undefined;
  const stop = async () => {
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
    await rm(directory, { recursive: true, force: true });
  };
  try {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, configYaml);
    stack = await start(database, testBus, configPath);
  } catch (error) {
    await stop();
    throw error;
  }
  return { stack, database, testBus, stop };
}
