import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The file roles of a provider folder (docs/providers.md, "A provider folder"), made checkable the way
// libs/testing/src/module-boundaries.test.ts checks imports: a new provider kind is a copy of a folder.
const providers = fileURLToPath(new URL('./', import.meta.url));

/** Folders under providers/ that are shared plumbing, not a kind. */
const SHARED = new Set(['http']);

/** A folder that owns a wire format: its request, answer, stream, usage, finish reasons, errors and zod types. */
const WIRE_ROLES = [
  '<kind>-adapter.ts',
  'create-<kind>-adapter.ts',
  '<kind>-api-types.ts',
  '<kind>-error.ts',
  'convert-to-<kind>-request.ts',
  'convert-<kind>-answer.ts',
  'convert-<kind>-stream.ts',
  'convert-<kind>-usage.ts',
  'map-<kind>-finish-reason.ts',
  '<kind>-adapter.test.ts',
  'convert-to-<kind>-request.test.ts',
  '__fixtures__/',
];
/** A folder that speaks another folder's wire format at its own URLs, with its own credentials. */
const HOSTED_ROLES = ['<kind>-adapter.ts', 'create-<kind>-adapter.ts', '<kind>-error.ts', '<kind>-paths.ts', '<kind>-adapter.test.ts'];
/** The built-in kind: no network, no wire format. */
const BUILT_IN_ROLES = ['<kind>-adapter.ts', 'create-<kind>-adapter.ts', '<kind>-adapter.test.ts'];

/** Every kind's folder and what it is; a kind missing here (or a folder missing for a kind) fails below. */
const KINDS: Record<string, { roles: string[]; wireOf?: string[] }> = {
  openai: { roles: WIRE_ROLES },
  anthropic: { roles: WIRE_ROLES },
  gemini: { roles: WIRE_ROLES },
  bedrock: { roles: WIRE_ROLES },
  vertex: { roles: HOSTED_ROLES, wireOf: ['anthropic', 'gemini'] },
  'azure-openai': { roles: HOSTED_ROLES, wireOf: ['openai'] },
  simulated: { roles: BUILT_IN_ROLES },
};

const folders = readdirSync(providers).filter((entry) => statSync(join(providers, entry)).isDirectory() && !SHARED.has(entry));
const entriesOf = (kind: string) => readdirSync(join(providers, kind)).map((entry) => (statSync(join(providers, kind, entry)).isDirectory() ? `${entry}/` : entry));
const roleFiles = (kind: string) => KINDS[kind]!.roles.map((role) => role.replace('<kind>', kind));

describe('provider folders: the same file roles in every folder', () => {
  it('has one folder per kind that create-adapter.ts builds, and each kind is built by its folder\'s create-<kind>-adapter.ts', () => {
    const createAdapter = readFileSync(join(providers, 'create-adapter.ts'), 'utf8');
    const cases = [...createAdapter.matchAll(/case '([a-z-]+)':/g)].map((match) => match[1]!);
    expect([...folders].sort()).toEqual(Object.keys(KINDS).sort());
    expect([...cases].sort()).toEqual(Object.keys(KINDS).sort());
    for (const kind of cases) expect(createAdapter, kind).toContain(`from './${kind}/create-${kind}-adapter.js'`);
  });

  for (const kind of Object.keys(KINDS)) {
    it(`${kind}: has every file of its roles, and every other file names the kind`, () => {
      const entries = entriesOf(kind);
      expect(roleFiles(kind).filter((file) => !entries.includes(file)), `missing in providers/${kind}/`).toEqual([]);
      // Anything beyond the roles is the kind's own (`<kind>-signer.ts`, `simulate-image.ts`), never a stray name.
      const own = new RegExp(`^(${kind}-|simulate-|convert-${kind}-|convert-to-${kind}-|map-${kind}-|create-${kind}-)`);
      expect(entries.filter((entry) => !roleFiles(kind).includes(entry) && entry !== '__fixtures__/' && !own.test(entry)), `files of providers/${kind}/ that name no role and not the kind`).toEqual([]);
    });
  }

  it('a folder with an api-types file keeps recorded answers of that format in __fixtures__/, and every recording is read by a test', () => {
    for (const kind of Object.keys(KINDS)) {
      const entries = entriesOf(kind);
      if (!entries.includes(`${kind}-api-types.ts`)) continue;
      expect(entries, kind).toContain('__fixtures__/');
      const tests = entries.filter((entry) => entry.endsWith('.test.ts')).map((entry) => readFileSync(join(providers, kind, entry), 'utf8')).join('\n');
      for (const recording of readdirSync(join(providers, kind, '__fixtures__'))) {
        expect(tests.includes(`'${recording}'`), `providers/${kind}/__fixtures__/${recording} is read by no test of the folder`).toBe(true);
      }
    }
  });

  it('a hosted kind reuses the converters of the wire format it speaks and has none of its own', () => {
    for (const [kind, { wireOf }] of Object.entries(KINDS)) {
      if (!wireOf) continue;
      const entries = entriesOf(kind);
      expect(entries.filter((entry) => entry.startsWith('convert-')), kind).toEqual([]);
      const sources = entries.filter((entry) => entry.endsWith('.ts') && !entry.endsWith('.test.ts')).map((entry) => readFileSync(join(providers, kind, entry), 'utf8')).join('\n');
      for (const wire of wireOf) expect(sources, `${kind} speaks ${wire}'s format through ../${wire}/`).toContain(`from '../${wire}/`);
    }
  });

  it('no production file of a provider folder imports a test library (test helpers live in apps/routing/test/)', () => {
    const offenders: string[] = [];
    for (const kind of [...Object.keys(KINDS), ...SHARED]) {
      for (const entry of readdirSync(join(providers, kind))) {
        if (!entry.endsWith('.ts') || entry.endsWith('.test.ts')) continue;
        const text = readFileSync(join(providers, kind, entry), 'utf8');
        if (/from '(vitest|@gateway\/testing)'/.test(text)) offenders.push(`${kind}/${entry}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
