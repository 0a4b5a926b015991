import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkLinks, type ChainLink } from './audit-links.js';

/** A chain of `count` entries whose hashes link (the contents are beside the point here). */
function chain(count: number): ChainLink[] {
  const entries: ChainLink[] = [];
  let previous = '0'.repeat(64);
  for (let seq = 1; seq <= count; seq++) {
    const hash = createHash('sha256').update(`${previous}:${seq}`).digest('hex');
    entries.push({ seq, prev_hash: previous, hash });
    previous = hash;
  }
  return entries;
}

describe('the operator view\'s check of an audit chain page', () => {
  const entries = chain(6);
  const head = { seq: 6, hash: entries[5]!.hash };

  it('holds for a whole chain, a first page, and a later page checked against the entry before it', () => {
    expect(checkLinks(entries, head)).toEqual({ ok: true, checked: 6 });
    expect(checkLinks(entries.slice(0, 3), head)).toEqual({ ok: true, checked: 3 });
    expect(checkLinks(entries.slice(3), head, entries[2])).toEqual({ ok: true, checked: 3 });
    expect(checkLinks([], { seq: 0, hash: '' })).toEqual({ ok: true, checked: 0 });
  });

  it('names a missing seq, a broken link, a wrong origin, and a head that is not the newest entry', () => {
    expect(checkLinks([...entries.slice(0, 2), ...entries.slice(3)], head)).toEqual({ ok: false, problem: 'seq 3 is missing (seq 4 follows seq 2)' });
    const rewritten = entries.map((entry) => (entry.seq === 4 ? { ...entry, hash: 'f'.repeat(64) } : entry));
    expect(checkLinks(rewritten, head)).toEqual({ ok: false, problem: 'seq 5 does not link to seq 4' });
    expect(checkLinks(entries.slice(3), head, { ...entries[2]!, hash: 'e'.repeat(64) })).toEqual({ ok: false, problem: 'seq 4 does not link to seq 3' });
    expect(checkLinks([{ ...entries[0]!, prev_hash: 'a'.repeat(64) }], head)).toEqual({ ok: false, problem: "seq 1 does not start from the chain's origin" });
    expect(checkLinks(entries, { seq: 6, hash: 'b'.repeat(64) })).toEqual({ ok: false, problem: "the head's hash is not seq 6's" });
    expect(checkLinks(entries, { seq: 5, hash: entries[4]!.hash })).toEqual({ ok: false, problem: 'seq 6 lies past the head (seq 5)' });
  });
});
