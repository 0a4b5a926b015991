import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * The bench's OS processes: spawned with a bounded log tail, JSON lines from stdout dispatched to
 * waiters, and a registry so every process is stopped at the end, failure or not.
 */

/** Lines of each process's output kept for a failure report. */
const LOG_TAIL_LINES = 200;
/** Most JSON lines queued unread per process. */
const MAX_QUEUED_EVENTS = 1_000;

export interface LaunchOptions {
  /** Arguments after `node` (script path first, or node flags then the script). */
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** Keep stdin open (the load generator reads `go` from it). */
  stdin?: boolean;
}

export class BenchChild {
  readonly process: ChildProcess;
  private readonly tail: string[] = [];
  private readonly events: Record<string, unknown>[] = [];
  private readonly waiters: { predicate: (event: Record<string, unknown>) => boolean; resolve: (event: Record<string, unknown>) => void }[] = [];
  readonly exited: Promise<number | null>;

  constructor(readonly name: string, options: LaunchOptions) {
    this.process = spawn(process.execPath, options.args, {
      cwd: options.cwd,
      env: options.env,
      stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
    this.exited = new Promise((resolve) => this.process.once('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))));
    createInterface({ input: this.process.stdout! }).on('line', (line) => this.onLine(line, true));
    createInterface({ input: this.process.stderr! }).on('line', (line) => this.onLine(line, false));
    running.add(this);
    void this.exited.then(() => running.delete(this));
  }

  get pid(): number {
    if (this.process.pid === undefined) throw new Error(`${this.name} did not start`);
    return this.process.pid;
  }

  private onLine(line: string, stdout: boolean): void {
    this.tail.push(`[${this.name}] ${line}`);
    if (this.tail.length > LOG_TAIL_LINES) this.tail.shift();
    if (!stdout || !line.startsWith('{')) return;
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const index = this.waiters.findIndex((waiter) => waiter.predicate(event));
    if (index >= 0) {
      const [waiter] = this.waiters.splice(index, 1);
      waiter!.resolve(event);
    } else if (this.events.length < MAX_QUEUED_EVENTS) {
      this.events.push(event);
    }
  }

  /** The next stdout JSON line matching `predicate` (also one already received); rejects on exit or timeout. */
  waitFor(predicate: (event: Record<string, unknown>) => boolean, timeoutMs: number): Promise<Record<string, unknown>> {
    const queued = this.events.findIndex(predicate);
    if (queued >= 0) return Promise.resolve(this.events.splice(queued, 1)[0]!);
    return new Promise((resolve, reject) => {
      const waiter = {
        predicate,
        resolve: (event: Record<string, unknown>) => {
          clearTimeout(timer);
          resolve(event);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`${this.name}: no expected output within ${timeoutMs} ms\n${this.logs()}`));
      }, timeoutMs);
      this.waiters.push(waiter);
      void this.exited.then((code) => {
        if (!this.waiters.includes(waiter)) return;
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${code}) before the expected output\n${this.logs()}`));
      });
    });
  }

  /** The first output line (stdout or stderr, within the kept tail) matching `pattern`; rejects on exit or timeout. */
  async waitForLine(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const line of this.tail) {
        const match = pattern.exec(line);
        if (match) return match;
      }
      if (this.process.exitCode !== null || this.process.signalCode !== null) throw new Error(`${this.name} exited before printing ${pattern}\n${this.logs()}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: no line matching ${pattern} within ${timeoutMs} ms\n${this.logs()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  send(line: string): void {
    this.process.stdin?.write(`${line}\n`);
  }

  logs(): string {
    return this.tail.join('\n');
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Resolves with the exit code. */
  async stop(graceMs = 8_000): Promise<number | null> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return this.process.exitCode;
    this.process.kill('SIGTERM');
    const timer = setTimeout(() => this.process.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

const running = new Set<BenchChild>();

/** Stops every process still running (front to back is the caller's job; this is the safety net). */
export async function stopAllChildren(): Promise<void> {
  await Promise.all([...running].map((child) => child.stop(3_000)));
}

/** Last resort on an abrupt exit of the orchestrator: no waiting possible, kill by pid. */
export function killAllChildrenNow(): void {
  for (const child of running) child.process.kill('SIGKILL');
}
