import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { createTestDatabase, type TestDatabase } from '@gateway/testing';
import { booleanArrayLiteral, integerArrayLiteral, nullableIntegerArrayLiteral, textArrayLiteral } from './pg-arrays.js';

let database: TestDatabase;
let db: Kysely<unknown>;
beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, schema: 'public', maxConnections: 1 });
});
afterAll(async () => {
  await db?.destroy();
  await database?.drop();
});

describe('array literals', () => {
  it('round-trip awkward text through Postgres unchanged', async () => {
    const values = ['plain', '', 'NULL', 'null', 'with space', 'comma,inside', 'quote"inside', 'back\\slash', '{braces}', 'tab\there', 'ünïcode ✓', 'line\nbreak'];
    const result = await sql<{ value: string }>`select unnest(${textArrayLiteral(values)}::text[]) as value`.execute(db);
    expect(result.rows.map((row) => row.value)).toEqual(values);
  });

  it('round-trip integers beyond 2^53 and booleans', async () => {
    const integers = [0n, -1n, 9_223_372_036_854_775_807n, -9_223_372_036_854_775_808n, 42];
    const result = await sql<{ value: bigint }>`select unnest(${integerArrayLiteral(integers)}::bigint[]) as value`.execute(db);
    expect(result.rows.map((row) => row.value)).toEqual(integers.map((value) => BigInt(value)));
    const booleans = [true, false, false, true];
    const flags = await sql<{ value: boolean }>`select unnest(${booleanArrayLiteral(booleans)}::boolean[]) as value`.execute(db);
    expect(flags.rows.map((row) => row.value)).toEqual(booleans);
    const empty = await sql<{ count: number }>`select cardinality(${textArrayLiteral([])}::text[]) as count`.execute(db);
    expect(empty.rows[0]!.count).toBe(0);
  });

  it('nullable integers: undefined is SQL null, zero and large values stay themselves', async () => {
    const literal = nullableIntegerArrayLiteral([0, undefined, 4_294_967_295, 7n, undefined]);
    const result = await sql<{ value: string | null }>`select unnest(${literal}::bigint[])::text as value`.execute(db);
    expect(result.rows.map((row) => row.value)).toEqual(['0', null, '4294967295', '7', null]);
  });
});
