import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { eventually } from '@gateway/testing';
import { startAccountStack, type AccountStack } from './account-harness.js';

// Keys at rest, for the whole stack: after 100 API keys made through the HTTP API, some of them used
// (charges, rate windows, activity), no table of any schema holds a plaintext key or its secret part,
// in any column of any type (each row is read whole as text), nor hex- or base64-encoded.

describe('no plaintext key anywhere in the database', () => {
  let harness: AccountStack;
  let db: Kysely<unknown>;

  beforeAll(async () => {
    harness = await startAccountStack();
    db = createDatabase<unknown>({ url: harness.database.url, schema: 'public', applicationName: 'plaintext-scan' });
  }, 120_000);

  afterAll(async () => {
    await db?.destroy();
    await harness?.stop();
  });

  it('after creating 100 keys and using some of them', async () => {
    const [first, second] = await Promise.all([harness.newAccount('scan-a', '10'), harness.newAccount('scan-b', '10')]);
    const plaintexts: string[] = [first.provisioningKey, second.provisioningKey];
    for (let batch = 0; batch < 10; batch++) {
      const created = await Promise.all(
        Array.from({ length: 10 }, (_, index) =>
          harness.createKey(index % 2 === 0 ? first : second, { name: `scan-${batch}-${index}`, credit_limit: 5, default_routing_strategy: 'balanced' }),
        ),
      );
      plaintexts.push(...created.map((key) => key.key));
      // Of each batch, one key of the first account is used, one disabled and one deleted, so those paths write what they write.
      const [used, , disabled, , deleted] = created;
      expect((await harness.chat(used!.key)).status).toBe(200);
      await harness.call('PATCH', `/v1/account/keys/${disabled!.id}`, { bearer: first.provisioningKey, body: { disabled: true } });
      await harness.call('DELETE', `/v1/account/keys/${deleted!.id}`, { bearer: first.provisioningKey });
    }
    expect(new Set(plaintexts).size).toBe(102);
    await eventually(async () => {
      const activity = await harness.call('GET', '/v1/account/activity?days=1', { bearer: first.provisioningKey });
      expect(activity.body.data.reduce((sum: number, entry: { requests: number }) => sum + entry.requests, 0)).toBe(10);
    }, 15_000);

    // The secret of a key is its 32-character random body (gw-api-<body>-<checksum>).
    const needles = plaintexts.flatMap((plaintext) => {
      const body = plaintext.split('-')[2]!;
      expect(body).toHaveLength(32);
      return [body, Buffer.from(body).toString('hex'), Buffer.from(body).toString('base64').slice(0, 40)];
    });

    // Positive control: a secret planted inside a jsonb value of a table of its own must be found.
    const canary = 'CanaryBody0123456789abcdefghijkl';
    await sql`create table public.scan_canary (id int8 primary key, payload jsonb)`.execute(db);
    await sql`insert into public.scan_canary values (1, ${JSON.stringify({ nested: [canary] })}::jsonb)`.execute(db);
    needles.push(canary);

    const tables = await sql<{ table_schema: string; table_name: string }>`
      select table_schema, table_name from information_schema.tables
      where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema') and table_schema not like 'pg_toast%'
      order by 1, 2`.execute(db);
    const schemas = new Set(tables.rows.map((row) => row.table_schema));
    for (const schema of ['auth', 'ledger', 'catalog', 'public']) expect(schemas).toContain(schema);

    let rowsScanned = 0;
    const leaks: string[] = [];
    for (const { table_schema: schema, table_name: table } of tables.rows) {
      const rows = await sql<{ text: string }>`select t::text as text from ${sql.table(`${schema}.${table}`)} as t`.execute(db);
      rowsScanned += rows.rows.length;
      for (const { text } of rows.rows) {
        const lowered = text.toLowerCase();
        for (const needle of needles) {
          if (text.includes(needle) || lowered.includes(needle.toLowerCase())) leaks.push(`${schema}.${table}: ${needle}`);
        }
      }
    }
    console.log(`plaintext scan: ${tables.rows.length} tables in ${schemas.size} schemas, ${rowsScanned} rows, ${needles.length} needles`);
    // The scan saw the keys' rows: 100 API keys and 2 provisioning keys are stored (as hashes).
    expect(rowsScanned).toBeGreaterThan(102);
    expect(leaks).toEqual([`public.scan_canary: ${canary}`]);
  }, 120_000);
});
