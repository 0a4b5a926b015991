import { spawn } from 'node:child_process';

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a client's command line to its end (stdin closed, so nothing can wait for an answer), killing it
 * and everything it started (its own process group: the npm launchers run a native binary) after
 * `timeoutMs`. The result carries everything it printed, for a failing test to show.
 */
export function runCli(command: string, args: readonly string[], options: { env: NodeJS.ProcessEnv; cwd: string; timeoutMs: number }): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    }, options.timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8') });
    });
  });
}

/** A run as a failing assertion shows it. */
export function describeRun(name: string, run: CliRun): string {
  return `${name} exited ${run.code ?? run.signal}\n--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`;
}
