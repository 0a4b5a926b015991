import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * What the system says about a pid. A zombie counts as gone: it has exited and only waits to be
 * reaped (containers whose init never reaps leave them for good), yet `kill(pid, 0)` still succeeds on it.
 */
export interface ProcessInfo {
  /** Kernel start time in clock ticks since boot (Linux); with the pid it names one process, across pid reuse. */
  startTicks?: string;
  parentPid?: number;
  /** argv as the process sees it (Linux /proc, else `ps`, split on spaces). */
  commandLine?: string[];
}

const onLinux = process.platform === 'linux';

/** The live process with this pid, or undefined when there is none (or only a zombie). */
export function liveProcess(pid: number): ProcessInfo | undefined {
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
  if (onLinux) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return undefined;
    }
    // The command name (2nd field) may hold spaces and parentheses; the fields after the last ')' do not.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
    let commandLine: string[] | undefined;
    try {
      commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((part) => part !== '');
    } catch {
      commandLine = undefined;
    }
    return { startTicks: fields[19], parentPid: Number(fields[1]), commandLine };
  }
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return undefined;
  }
  try {
    const [parent, ...command] = execFileSync('ps', ['-o', 'ppid=,command=', '-p', String(pid)], { encoding: 'utf8' }).trim().split(/\s+/);
    return { parentPid: Number(parent), commandLine: command };
  } catch {
    return {};
  }
}

/** Waits until the pid is gone (or a zombie), polling; false when it still runs after `timeoutMs`. */
export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (liveProcess(pid)) {
    if (Date.now() >= deadline) return false;
    await sleep(100);
  }
  return true;
}

/** Sends a signal, ignoring a process that has just gone. */
export function signalProcess(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}
