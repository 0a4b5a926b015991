import { spawnSync } from 'node:child_process';
import { cp, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** A process that has exited: what a SIGKILLed owner leaves in its lock files. */
let deadPid: number | undefined;

/**
 * A directory of segment logs (usage outbox, bus journal) copied to `copy` as a SIGKILL of its owner
 * would leave it: every resolved append is fdatasync'ed, so a copy taken while the owner is still
 * open holds what a kill would leave, and its lock files name a dead process. The original stays
 * locked by this process, so the copy is what a "restarted process" opens.
 */
export async function crashCopy(directory: string, copy: string): Promise<string> {
  deadPid ??= spawnSync(process.execPath, ['-e', '']).pid;
  await cp(directory, copy, { recursive: true });
  for (const name of await readdir(copy)) {
    if (name.endsWith('.lock')) await writeFile(join(copy, name), String(deadPid));
  }
  return copy;
}
