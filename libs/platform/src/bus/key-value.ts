/**
 * The key-value port of the bus: small records shared by every replica of a service, written with
 * compare-and-set so that exactly one writer wins a race (the edge's Idempotency-Key records). JetStream
 * keeps them in a key-value bucket (nats-key-value.ts); single-process mode in memory (below).
 */

/** One stored value and the revision that names it (compare-and-set writes name the revision they replace). */
export interface KeyValueEntry {
  value: Uint8Array;
  revision: number;
}

export interface KeyValueBucketOptions {
  /** Bucket name: letters, digits, `_` and `-` (the bus's namespace is added to it). */
  name: string;
  /** How long a value is kept after its last write. */
  ttlMs: number;
  /** Bound of the whole bucket in bytes; past it the oldest values are dropped. */
  maxBytes: number;
  /** Largest value accepted; a bigger write is refused (KeyValueValueTooLarge). */
  maxValueBytes: number;
}

/** Keys are what NATS allows in a subject token: letters, digits, `-`, `_`, `=`, and `.` between tokens. */
export const KEY_VALUE_KEY = /^[-_=A-Za-z0-9]+(\.[-_=A-Za-z0-9]+)*$/;

export interface KeyValueBucket {
  /** The key's value, or undefined when it has none (never written, or expired). */
  get(key: string): Promise<KeyValueEntry | undefined>;
  /** Writes when the key has no value; the new revision, or undefined when another write got there first. */
  create(key: string, value: Uint8Array): Promise<number | undefined>;
  /** Writes when the key's value is still `revision`; the new revision, or undefined when it moved on. */
  update(key: string, value: Uint8Array, revision: number): Promise<number | undefined>;
  /**
   * Resolves once the key holds a revision other than `revision` (a write, or the value expired), or after
   * `timeoutMs`, whichever is first. It says nothing about which: the caller reads the key again.
   */
  changed(key: string, revision: number | undefined, timeoutMs: number): Promise<void>;
}

export class KeyValueValueTooLarge extends Error {
  override name = 'KeyValueValueTooLarge';
}

interface MemoryEntry {
  value: Uint8Array;
  revision: number;
  writtenAt: number;
}

/**
 * A bucket in this process's memory (single-process mode, where one edge is the only writer). The same
 * contract as JetStream's: compare-and-set revisions, values dropped `ttlMs` after their last write, the
 * oldest dropped first past `maxBytes`.
 */
export class MemoryKeyValueBucket implements KeyValueBucket {
  /** In write order (a write moves its key to the end), so the oldest are first. */
  private readonly entries = new Map<string, MemoryEntry>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private bytes = 0;
  private lastRevision = 0;

  constructor(
    private readonly options: KeyValueBucketOptions,
    private readonly now: () => number = Date.now,
  ) {}

  async get(key: string): Promise<KeyValueEntry | undefined> {
    const entry = this.live(key);
    return entry ? { value: entry.value, revision: entry.revision } : undefined;
  }

  async create(key: string, value: Uint8Array): Promise<number | undefined> {
    if (this.live(key)) return undefined;
    return this.write(key, value);
  }

  async update(key: string, value: Uint8Array, revision: number): Promise<number | undefined> {
    if (this.live(key)?.revision !== revision) return undefined;
    return this.write(key, value);
  }

  changed(key: string, revision: number | undefined, timeoutMs: number): Promise<void> {
    if (this.live(key)?.revision !== revision) return Promise.resolve();
    return new Promise((resolve) => {
      let waiting = this.waiters.get(key);
      if (!waiting) this.waiters.set(key, (waiting = new Set()));
      const set = waiting;
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0 && this.waiters.get(key) === set) this.waiters.delete(key);
        resolve();
      };
      // An expiry is a change too: the timer never waits past the value's end.
      const entry = this.entries.get(key);
      const untilExpiry = entry ? Math.max(0, entry.writtenAt + this.options.ttlMs - this.now()) : timeoutMs;
      const timer = setTimeout(done, Math.min(timeoutMs, untilExpiry));
      set.add(done);
    });
  }

  private write(key: string, value: Uint8Array): number {
    if (value.byteLength > this.options.maxValueBytes) throw new KeyValueValueTooLarge(`value of ${value.byteLength} bytes is over the bucket's ${this.options.maxValueBytes}`);
    this.drop(key);
    const revision = ++this.lastRevision;
    this.entries.set(key, { value, revision, writtenAt: this.now() });
    this.bytes += value.byteLength;
    this.evict();
    for (const wake of [...(this.waiters.get(key) ?? [])]) wake();
    return revision;
  }

  /** The key's entry unless it expired (an expired one is dropped here). */
  private live(key: string): MemoryEntry | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.writtenAt + this.options.ttlMs > this.now()) return entry;
    this.drop(key);
    return undefined;
  }

  private drop(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.bytes -= entry.value.byteLength;
  }

  /** Expired values first (they are the oldest), then the oldest live ones while over the byte bound. */
  private evict(): void {
    const now = this.now();
    for (const [key, entry] of this.entries) {
      if (entry.writtenAt + this.options.ttlMs > now && this.bytes <= this.options.maxBytes) break;
      this.drop(key);
    }
  }
}
