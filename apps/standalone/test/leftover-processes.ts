import { readdirSync, readFileSync } from 'node:fs';
import { signalProcess, waitForExit } from '../src/process-identity.js';

/**
 * Stops every process whose command line mentions `marker` (a test's own data dir): an embedded Postgres a
 * killed gateway left behind is found this way. SIGINT (Postgres's fast shutdown) first, SIGKILL after 10 s.
 */
export async function stopProcessesMentioning(marker: string): Promise<void> {
  const leftovers = readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
    } catch {
      return false;
    }
  });
  for (const pid of leftovers) signalProcess(pid, 'SIGINT');
  for (const pid of leftovers) if (!(await waitForExit(pid, 10_000))) signalProcess(pid, 'SIGKILL');
}
