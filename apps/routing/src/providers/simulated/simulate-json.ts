/*
 * A JSON value conforming to a (simple) JSON Schema, built from words the simulated provider would
 * have said anyway, so json_schema requests get structurally valid answers without a model.
 * Covers what structured-output schemas use: type (also type lists), properties/required,
 * additionalProperties, items/prefixItems, min/max items, enum/const, string length bounds and
 * common formats, numeric bounds and multipleOf, anyOf/oneOf/allOf, local $ref ($defs/definitions).
 */

type Schema = Record<string, unknown>;

/** Nesting followed: deeper (or recursive) schemas end in the smallest value that fits. */
const MAX_DEPTH = 8;
/** Array items generated when the schema leaves it open. */
const DEFAULT_ITEMS = 2;
/** Bound on items whatever the schema says (a minItems of a million is not honoured by a simulator). */
const MAX_ITEMS = 16;
/**
 * Bound on one string whatever minLength says: filling a client's `minLength: 10000000` held routing's
 * event loop for 3.5 s, and 100000000 had not finished after 50 s. Past the bound the answer does not
 * conform, and fails like any broken answer.
 */
const MAX_STRING_CHARACTERS = 65_536;
/**
 * Bound on the values of one answer: recursive `$ref`s with several properties each grow as
 * properties^MAX_DEPTH (10 properties, 10^8 values). Once spent, every further value is null.
 */
const MAX_VALUES = 10_000;

const FORMAT_SAMPLES: Readonly<Record<string, string>> = {
  'date-time': '2026-01-01T00:00:00Z',
  date: '2026-01-01',
  time: '00:00:00Z',
  email: 'someone@example.com',
  uri: 'https://example.com/',
  url: 'https://example.com/',
  uuid: '00000000-0000-4000-8000-000000000000',
  hostname: 'example.com',
  ipv4: '192.0.2.1',
  ipv6: '2001:db8::1',
};

function isSchema(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

class Sampler {
  private wordIndex = 0;
  private valuesLeft = MAX_VALUES;

  constructor(private readonly root: Schema, private readonly words: readonly string[]) {}

  private word(): string {
    if (this.words.length === 0) return 'value';
    return this.words[this.wordIndex++ % this.words.length]!;
  }

  private resolveRef(ref: string): Schema | undefined {
    if (!ref.startsWith('#')) return undefined;
    let node: unknown = this.root;
    for (const segment of ref.slice(1).split('/').filter(Boolean)) {
      if (!isSchema(node)) return undefined;
      node = node[segment.replace(/~1/g, '/').replace(/~0/g, '~')];
    }
    return isSchema(node) ? node : undefined;
  }

  sample(schema: unknown, depth: number): unknown {
    if (--this.valuesLeft < 0) return null;
    if (schema === true || !isSchema(schema)) return this.word();
    if (depth > MAX_DEPTH) return null;
    if (typeof schema.$ref === 'string') {
      const target = this.resolveRef(schema.$ref);
      return target ? this.sample(target, depth + 1) : null;
    }
    if ('const' in schema) return schema.const;
    if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
    if (Array.isArray(schema.allOf) && schema.allOf.length > 0) {
      // Merge object branches: enough for the usual "base object + extra fields" use of allOf.
      const merged: Schema = { ...schema, allOf: undefined };
      for (const branch of schema.allOf) {
        if (!isSchema(branch)) continue;
        merged.type ??= branch.type;
        merged.properties = { ...(merged.properties as Schema | undefined), ...(branch.properties as Schema | undefined) };
        merged.required = [...((merged.required as string[] | undefined) ?? []), ...((branch.required as string[] | undefined) ?? [])];
      }
      return this.sample(merged, depth + 1);
    }
    for (const key of ['anyOf', 'oneOf'] as const) {
      const options = schema[key];
      if (Array.isArray(options) && options.length > 0) {
        // Prefer a non-null branch: `anyOf: [{...}, {type: 'null'}]` is how optional fields are spelled.
        const chosen = options.find((option) => !(isSchema(option) && option.type === 'null')) ?? options[0];
        return this.sample(chosen, depth + 1);
      }
    }
    const type = Array.isArray(schema.type) ? (schema.type.find((entry) => entry !== 'null') ?? schema.type[0]) : schema.type;
    switch (type) {
      case 'object':
        return this.object(schema, depth);
      case 'array':
        return this.array(schema, depth);
      case 'string':
        return this.string(schema);
      case 'integer':
        return this.number(schema, true);
      case 'number':
        return this.number(schema, false);
      case 'boolean':
        return true;
      case 'null':
        return null;
      default:
        if (isSchema(schema.properties)) return this.object(schema, depth);
        if (schema.items !== undefined) return this.array(schema, depth);
        return this.word();
    }
  }

  private object(schema: Schema, depth: number): Record<string, unknown> {
    const result: Record<string, unknown> = {};
    const properties = isSchema(schema.properties) ? schema.properties : {};
    // Every declared property: strict schemas require all of them, and extras are allowed otherwise.
    for (const [name, property] of Object.entries(properties)) result[name] = this.sample(property, depth + 1);
    for (const name of Array.isArray(schema.required) ? schema.required : []) {
      if (typeof name === 'string' && !(name in result)) {
        result[name] = isSchema(schema.additionalProperties) ? this.sample(schema.additionalProperties, depth + 1) : this.word();
      }
    }
    if (Object.keys(result).length === 0 && schema.additionalProperties !== false && !isSchema(schema.properties)) {
      result.answer = this.sentence(8);
    }
    return result;
  }

  private array(schema: Schema, depth: number): unknown[] {
    const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
    const minimum = typeof schema.minItems === 'number' ? schema.minItems : 0;
    const maximum = typeof schema.maxItems === 'number' ? schema.maxItems : Number.POSITIVE_INFINITY;
    const count = Math.min(MAX_ITEMS, maximum, Math.max(minimum, prefix.length, DEFAULT_ITEMS));
    const items: unknown[] = [];
    for (let index = 0; index < count; index++) {
      const itemSchema = index < prefix.length ? prefix[index] : schema.items;
      if (itemSchema === false) break;
      items.push(this.sample(itemSchema ?? {}, depth + 1));
    }
    return items;
  }

  private sentence(words: number): string {
    return Array.from({ length: words }, () => this.word()).join(' ');
  }

  private string(schema: Schema): string {
    const format = typeof schema.format === 'string' ? FORMAT_SAMPLES[schema.format] : undefined;
    let text = format ?? this.sentence(3);
    const minimum = Math.min(typeof schema.minLength === 'number' ? schema.minLength : 0, MAX_STRING_CHARACTERS);
    const maximum = typeof schema.maxLength === 'number' ? schema.maxLength : Number.POSITIVE_INFINITY;
    while (text.length < minimum) text += ` ${this.word()}`;
    if (text.length > maximum) text = text.slice(0, maximum);
    return text;
  }

  private number(schema: Schema, integer: boolean): number {
    const bound = (key: string) => (typeof schema[key] === 'number' ? (schema[key] as number) : undefined);
    const exclusiveMinimum = bound('exclusiveMinimum');
    const exclusiveMaximum = bound('exclusiveMaximum');
    const low = bound('minimum') ?? (exclusiveMinimum !== undefined ? exclusiveMinimum + (integer ? 1 : 0.5) : undefined);
    const high = bound('maximum') ?? (exclusiveMaximum !== undefined ? exclusiveMaximum - (integer ? 1 : 0.5) : undefined);
    let value = low ?? (high !== undefined ? Math.min(high, 42) : 42);
    if (integer) value = Math.ceil(value);
    const step = bound('multipleOf');
    if (step !== undefined && step > 0) value = Math.ceil(value / step) * step;
    if (high !== undefined && value > high) value = high;
    return value;
  }
}

/** A JSON value for the schema (parsed JSON Schema object), using `words` for strings. */
export function sampleJsonForSchema(schema: unknown, words: readonly string[]): unknown {
  return new Sampler(isSchema(schema) ? schema : {}, words).sample(schema, 0);
}
