import fc from 'fast-check';
import type { RecordedRequest } from '@gateway/testing';
import { randomUUID, tagOf, type FuzzAccount, type FuzzStack } from './fuzz-stack.js';

// File ids as request inputs (issue 41) in the invariant fuzzer: an HTTP plan of the chat or responses dialect
// sometimes carries a `file_id` part. The owner's own `user_data` file is a request like any other (admitted,
// charged and answered by the usual invariants) whose upstream request holds the file's marker; the owner's
// `batch` file is a 400 that reaches no upstream and charges nothing; another account's key naming the owner's
// file is the stranger case: 404 file_not_found, nothing upstream, nothing charged, and the owner's marker in
// no upstream request made for it (docs/security.md, "a file id is its owner's only").

/** Which file a plan's part names, and who sends it: the owner, or a stranger (`-1`: account B). */
export interface FilePartPlan {
  kind: 'own' | 'batch' | 'stranger';
  /** Which of the owner's two user_data files (own and stranger). */
  which: 0 | 1;
  /** The caller of a stranger plan: another generated account, or account B (-1). */
  stranger: number;
}

export const filePartArb = (accounts: number): fc.Arbitrary<FilePartPlan> =>
  fc.record({
    kind: fc.constantFrom<FilePartPlan['kind']>('own', 'own', 'batch', 'stranger', 'stranger', 'stranger'),
    which: fc.constantFrom<0 | 1>(0, 1),
    stranger: fc.integer({ min: -1, max: accounts - 1 }),
  });

/** The files an account was given for a run: two user_data files, each with its own marker, and a batch file. */
export interface OwnerFiles {
  userData: [{ id: string; marker: string }, { id: string; marker: string }];
  batchId: string;
}

async function upload(fuzz: FuzzStack, apiKey: string, text: string, filename: string, purpose: string): Promise<string> {
  const form = new FormData();
  form.append('purpose', purpose);
  form.append('file', new Blob([text]), filename);
  const response = await fetch(`${fuzz.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: form });
  const json = (await response.json().catch(() => undefined)) as { id?: unknown } | undefined;
  if (response.status !== 200 || typeof json?.id !== 'string') throw new Error(`file upload (${purpose}) answered ${response.status}: ${JSON.stringify(json)}`);
  return json.id;
}

/**
 * Uploads an account's files. A marker is hex after a word no tag starts with (tags are `fz<run>…`), and the
 * file names carry none, so the marker is found only where the file's text went.
 */
export async function uploadOwnerFiles(fuzz: FuzzStack, owner: FuzzAccount): Promise<OwnerFiles> {
  const marker = () => `filemark${randomUUID().replace(/-/g, '')}`;
  const userData = await Promise.all([0, 1].map(async (index) => {
    const mark = marker();
    return { id: await upload(fuzz, owner.apiKey, `Private notes ${index}: the word is ${mark}.\n`, `notes-${index}.txt`, 'user_data'), marker: mark };
  }));
  const line = `${JSON.stringify({ custom_id: 'r0', method: 'POST', url: '/v1/chat/completions', body: { model: 'fz/free', messages: [{ role: 'user', content: 'batch line' }] } })}\n`;
  const batchId = await upload(fuzz, owner.apiKey, line, 'input.jsonl', 'batch');
  return { userData: [userData[0]!, userData[1]!], batchId };
}

/** The file id a plan names. */
export function fileIdOf(files: OwnerFiles, plan: FilePartPlan): string {
  return plan.kind === 'batch' ? files.batchId : files.userData[plan.which].id;
}

/** What the fuzzer saw of one request that carried a file part. */
export interface FileOutcome {
  tag: string;
  /** The owner of the file (a generated account's index). */
  owner: number;
  file: FilePartPlan;
  status: number;
  code?: string;
  requestId?: string;
  aborted: boolean;
}

/**
 * The file invariants of one sequence, from the answers, the ledger's charges (by request id) and every request
 * the fake upstreams recorded.
 */
export function checkFileInputs(
  outcomes: readonly FileOutcome[],
  files: ReadonlyMap<number, OwnerFiles>,
  upstream: readonly RecordedRequest[],
  charged: ReadonlySet<string>,
  stats: { outcomes: Record<string, number> },
): string[] {
  const violations: string[] = [];
  const bodies = upstream.map((request) => ({ tag: tagOf(request.body), text: JSON.stringify(request.body ?? '') }));
  const ownTags = new Map<string, string>();
  for (const outcome of outcomes) {
    const name = `file ${outcome.file.kind}${outcome.file.kind === 'stranger' && outcome.file.stranger < 0 ? ' (B)' : ''} ${outcome.aborted ? 'aborted' : `${outcome.status}${outcome.code ? ` ${outcome.code}` : ''}`}`;
    stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1;
    const owned = files.get(outcome.owner)!;
    const reached = bodies.filter((body) => body.tag === outcome.tag);
    if (outcome.file.kind === 'own') {
      const { marker } = owned.userData[outcome.file.which];
      ownTags.set(outcome.tag, marker);
      // Its file's text went with every upstream attempt; an answered request had at least one.
      for (const body of reached) if (!body.text.includes(marker)) violations.push(`${outcome.tag}: account ${outcome.owner}'s own file reached the upstream without its text: ${body.text.slice(0, 300)}`);
      if (outcome.status === 200 && reached.length === 0) violations.push(`${outcome.tag}: answered 200 with the owner's file, no upstream request carries it`);
      continue;
    }
    const caller = outcome.file.kind === 'batch' ? `account ${outcome.owner}` : outcome.file.stranger < 0 ? 'account B' : `account ${outcome.file.stranger}`;
    const expected = outcome.file.kind === 'batch' ? [400, 'invalid_file_purpose'] : [404, 'file_not_found'];
    // What the request itself earns answers before any file is read: a `provider` filter that leaves none of
    // the model's providers (routing's 400), and for a generated account its own admission (balance, credit
    // limit, budget, rate window); account B's 50 credits admit every request the fuzzer makes.
    const earlier = (outcome.status === 400 && outcome.code === 'no_provider_matches')
      || (caller !== 'account B' && (outcome.status === 402 || outcome.status === 429));
    if (!earlier && (outcome.status !== expected[0] || outcome.code !== expected[1])) {
      violations.push(`${outcome.tag}: ${caller} naming account ${outcome.owner}'s ${outcome.file.kind === 'batch' ? 'batch file' : 'file'} got ${outcome.status} ${outcome.code ?? ''}, not ${expected.join(' ')}`);
    }
    if (outcome.requestId && charged.has(outcome.requestId)) violations.push(`${outcome.tag}: ${caller}'s refused file request was charged (${outcome.requestId})`);
    if (reached.length > 0) violations.push(`${outcome.tag}: ${caller}'s refused file request reached an upstream ${reached.length} time(s)`);
  }
  // A user_data file's text is in no upstream request but its owner's own requests naming it.
  for (const [owner, owned] of files) {
    for (const { marker, id } of owned.userData) {
      for (const body of bodies) {
        if (body.text.includes(marker) && (body.tag === undefined || ownTags.get(body.tag) !== marker)) {
          violations.push(`account ${owner}'s file ${id} reached an upstream in a request not its owner's naming it (tag ${body.tag ?? 'none'})`);
        }
      }
    }
  }
  return violations;
}
