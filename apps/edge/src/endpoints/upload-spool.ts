import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { edgeErrors } from '../errors.js';

/**
 * Where uploaded files wait and how many of their bytes the edge holds in memory at once (docs/endpoints.md
 * "Embeddings, moderations, images and audio", Uploads). A multipart file part is written to a spool
 * file as it arrives (never gathered in memory); a request loads its files only under the memory
 * budget, which it holds until its answer is over, because the bytes then travel on through the
 * media and routing hops. Past the budget a request waits (first come, first served) up to `waitMs`,
 * then gets 503 `overloaded`.
 */
export interface UploadLimits {
  /** Directory of the spool (a private subdirectory is made in it at start); must be writable. Default: os.tmpdir(). */
  dir: string;
  /** Most bytes of uploaded files loaded in memory at once across the process. A request alone past it is still let through. */
  memoryBytes: number;
  /** Longest wait for room in the budget before the 503. */
  waitMs: number;
  /** Retry-After of that 503. */
  retryAfterSeconds: number;
}

export const DEFAULT_UPLOAD_LIMITS: UploadLimits = {
  dir: tmpdir(),
  memoryBytes: 32 * 1024 * 1024,
  waitMs: 60_000,
  retryAfterSeconds: 5,
};

interface Waiter {
  bytes: number;
  grant: () => void;
}

/** A first-come-first-served byte semaphore. */
export class ByteBudget {
  private held = 0;
  private readonly queue: Waiter[] = [];

  constructor(readonly capacity: number) {
    if (!(Number.isSafeInteger(capacity) && capacity >= 1)) throw new Error(`upload memory budget must be a positive integer: ${capacity}`);
  }

  get heldBytes(): number {
    return this.held;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Takes `bytes` (at most the whole capacity: a request larger than the budget waits until it is alone)
   * and resolves its release, which may be called more than once. Rejects after `waitMs`, or when
   * `signal` aborts, having taken nothing.
   */
  acquire(bytes: number, waitMs: number, onTimeout: () => Error, signal?: AbortSignal): Promise<() => void> {
    const wanted = Math.min(Math.max(0, bytes), this.capacity);
    const releaser = () => {
      let released = false;
      return () => {
        if (released) return;
        released = true;
        this.held -= wanted;
        this.pump();
      };
    };
    if (this.queue.length === 0 && this.held + wanted <= this.capacity) {
      this.held += wanted;
      return Promise.resolve(releaser());
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        bytes: wanted,
        grant: () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          resolve(releaser());
        },
      };
      const leave = (error: Error) => {
        const index = this.queue.indexOf(waiter);
        if (index >= 0) this.queue.splice(index, 1);
        signal?.removeEventListener('abort', onAbort);
        clearTimeout(timer);
        // The head of the queue may have been the one blocking smaller requests behind it.
        this.pump();
        reject(error);
      };
      const onAbort = () => leave(new Error('aborted while waiting for upload memory'));
      const timer = setTimeout(() => leave(onTimeout()), waitMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(waiter);
    });
  }

  private pump(): void {
    while (this.queue.length > 0 && this.held + this.queue[0]!.bytes <= this.capacity) {
      const next = this.queue.shift()!;
      this.held += next.bytes;
      next.grant();
    }
  }
}

/** The process's spool directory and memory budget. */
export class UploadArea {
  readonly budget: ByteBudget;
  private directory: string | undefined;

  constructor(readonly limits: UploadLimits = DEFAULT_UPLOAD_LIMITS) {
    this.budget = new ByteBudget(limits.memoryBytes);
  }

  /** The private spool directory (made on first use: 0700 under `dir`); throws naming `dir` when it cannot be made. */
  spoolDirectory(): string {
    if (this.directory === undefined) {
      try {
        this.directory = mkdtempSync(join(this.limits.dir, 'gateway-uploads-'));
      } catch (error) {
        throw new Error(`upload spool directory ${this.limits.dir} is not writable: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    return this.directory;
  }

  /** Waits for room for `bytes` in the memory budget (503 `overloaded` after the bound). */
  reserve(bytes: number, signal?: AbortSignal): Promise<() => void> {
    return this.budget.acquire(bytes, this.limits.waitMs, () => edgeErrors.overloaded(this.limits.retryAfterSeconds), signal);
  }

  /** Removes the spool directory and whatever is still in it. */
  close(): void {
    if (this.directory !== undefined) rmSync(this.directory, { recursive: true, force: true });
    this.directory = undefined;
  }
}

let processDefault: UploadArea | undefined;

/** The area of an edge started without one (in-process tests that build their own context). */
export function defaultUploadArea(): UploadArea {
  processDefault ??= new UploadArea();
  return processDefault;
}
