import { closeSync, linkSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { StartupError } from '@gateway/platform';
import { liveProcess } from './process-identity.js';

/**
 * Claims a data dir for this process through `<dataDir>/gateway.pid` (pid and kernel start time), so a
 * second gateway on the same data dir refuses to start instead of stopping the first one's embedded
 * Postgres as if a crash had left it behind. A crashed holder leaves the file; it is taken over when
 * its pid is gone or now names another process (the start time differs). The file is removed at exit.
 */
export function lockDataDir(dataDir: string): void {
  const file = join(dataDir, 'gateway.pid');
  const own = `${process.pid} ${liveProcess(process.pid)?.startTicks ?? '-'}\n`;
  for (let attempt = 0; attempt < 2; attempt += 1) {
    let descriptor: number;
    try {
      descriptor = openSync(file, 'wx', 0o644);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const content = readOrEmpty(file);
      const holder = runningHolder(content);
      if (holder !== undefined) throw new StartupError(`another gateway is running on this data dir (pid ${holder})`);
      // A crashed run's file: moved aside rather than deleted, so that when another start took it over
      // in between, what was moved is seen to be a live claim and is put back.
      const aside = `${file}.${process.pid}`;
      try { renameSync(file, aside); } catch { continue; }
      const moved = readOrEmpty(aside);
      if (moved !== content) {
        try { linkSync(aside, file); } catch { /* a third start claimed it meanwhile */ }
        unlinkSync(aside);
        throw new StartupError(`another gateway is running on this data dir (pid ${moved.split(' ')[0]})`);
      }
      unlinkSync(aside);
      continue;
    }
    writeSync(descriptor, own);
    closeSync(descriptor);
    process.once('exit', () => {
      try {
        if (readFileSync(file, 'utf8') === own) unlinkSync(file);
      } catch { /* already gone */ }
    });
    return;
  }
  const holder = runningHolder(readOrEmpty(file));
  throw new StartupError(`another gateway is running on this data dir${holder === undefined ? '' : ` (pid ${holder})`}`);
}

function readOrEmpty(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/** The pid recorded in a lock file's content when that process still runs, else undefined. */
function runningHolder(content: string): number | undefined {
  const [pidText, startTicks] = content.trim().split(' ');
  const pid = Number(pidText);
  const running = liveProcess(pid);
  if (!running) return undefined;
  // Without a recorded or readable start time (not Linux), a live pid has to count as the holder.
  if (startTicks && startTicks !== '-' && running.startTicks && running.startTicks !== startTicks) return undefined;
  return pid;
}
