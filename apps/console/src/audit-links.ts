/** The fields of an audit entry that tie it to its chain. */
export interface ChainLink {
  seq: number;
  prev_hash: string;
  hash: string;
}

export type LinkCheck = { ok: true; checked: number } | { ok: false; problem: string };

const GENESIS = '0'.repeat(64);

/**
 * What the page can check of one chain's page as GET /v1/admin/audit answers it (oldest first, no account
 * filter): seqs follow each other, each entry's prev_hash is the hash of the one before (64 zeros before
 * seq 1), and the newest entry shown, when it is the head's seq, has the head's hash. It does not
 * recompute the hashes from the entries' contents: `gatewayctl audit verify` does that.
 */
export function checkLinks(entries: readonly ChainLink[], head: { seq: number; hash: string }, before?: ChainLink): LinkCheck {
  let previous = before;
  for (const entry of entries) {
    if (previous === undefined) {
      if (entry.seq === 1 && entry.prev_hash !== GENESIS) return { ok: false, problem: `seq 1 does not start from the chain's origin` };
    } else {
      if (entry.seq !== previous.seq + 1) return { ok: false, problem: `seq ${previous.seq + 1} is missing (seq ${entry.seq} follows seq ${previous.seq})` };
      if (entry.prev_hash !== previous.hash) return { ok: false, problem: `seq ${entry.seq} does not link to seq ${previous.seq}` };
    }
    previous = entry;
  }
  const last = entries[entries.length - 1];
  if (last !== undefined) {
    if (last.seq > head.seq) return { ok: false, problem: `seq ${last.seq} lies past the head (seq ${head.seq})` };
    if (last.seq === head.seq && last.hash !== head.hash) return { ok: false, problem: `the head's hash is not seq ${last.seq}'s` };
  }
  return { ok: true, checked: entries.length };
}
