import { describe, expect, it } from 'vitest';
import { jsonSchemaEngineFor, jsonSchemaProblem } from './json-schema.js';

describe('jsonSchemaProblem (a client schema against its meta-schema)', () => {
  it('accepts valid schemas of draft-07 and 2020-12', () => {
    expect(jsonSchemaProblem({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false })).toBeUndefined();
    expect(jsonSchemaProblem({ $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }] })).toBeUndefined();
    expect(jsonSchemaProblem({})).toBeUndefined();
  });

  it('names what is wrong, from `schema`', () => {
    expect(jsonSchemaProblem({ type: 12 })).toMatch(/^schema\/type must be equal to one of the allowed values/);
    expect(jsonSchemaProblem({ type: 'object', properties: 5 })).toBe('schema/properties must be object');
    expect(jsonSchemaProblem({ type: 'object', required: 'city' })).toBe('schema/required must be array');
    expect(jsonSchemaProblem({ $schema: 'https://json-schema.org/draft/2020-12/schema', prefixItems: 5 })).toBe('schema/prefixItems must be array');
  });

  it('leaves a schema of a draft it does not know to the provider', () => {
    expect(jsonSchemaProblem({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'object', exclusiveMinimum: true })).toBeUndefined();
  });

  it('keeps nothing per schema: the meta-schema check compiles no validator', () => {
    const engine = jsonSchemaEngineFor({});
    jsonSchemaProblem({ type: 'string' });
    const cached = (engine as unknown as { _cache: Map<unknown, unknown> })._cache.size;
    for (let index = 0; index < 50; index++) jsonSchemaProblem({ type: 'object', properties: { [`field${index}`]: { type: 'string' } } });
    expect((engine as unknown as { _cache: Map<unknown, unknown> })._cache.size).toBe(cached);
  });
});
