import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';

/*
 * The JSON Schema engines of the gateway (ajv), one per draft, shared by the edge — which checks a
 * client's response_format schema against its draft's meta-schema, so an invalid schema is the client's
 * 400 before any provider is asked — and routing, which compiles schemas to check the answers of
 * providers without native JSON modes. A subpath of its own (`@gateway/platform/json-schema`) so that
 * services which never see a schema do not load ajv.
 */

export type { ValidateFunction };

// `optimize: false`: ajv's code optimizer is most of a compile's cost on wide schemas (1,000 properties:
// 1.9 s with it, 0.25 s without, on routing's event loop); the generated validators check the same.
const ENGINE_OPTIONS = { strict: false, allErrors: false, validateFormats: false, code: { optimize: false } } as const;
const draft07 = new Ajv(ENGINE_OPTIONS);
const draft2020 = new Ajv2020(ENGINE_OPTIONS);

export type JsonSchemaEngine = Ajv;

/** The engine for a schema's declared draft: 2020-12 (and 2019-09) when `$schema` says so, else draft-07. */
export function jsonSchemaEngineFor(schema: Record<string, unknown>): JsonSchemaEngine {
  const declared = typeof schema.$schema === 'string' ? schema.$schema : '';
  return declared.includes('2020-12') || declared.includes('2019-09') ? draft2020 : draft07;
}

/**
 * Why `schema` is not a valid JSON Schema of its draft (its meta-schema's first complaint, paths
 * spelled from `schema`), or undefined when it is — or when its `$schema` names a draft these engines do
 * not know (draft-04, a custom meta-schema): then there is nothing to judge it by here, and the provider
 * does. Only the meta-schema is checked, no validator is compiled: ~tens of µs, no code generated, nothing
 * kept. What only compiling finds (a `$ref` that resolves nowhere) is routing's to report.
 */
export function jsonSchemaProblem(schema: Record<string, unknown>): string | undefined {
  const engine = jsonSchemaEngineFor(schema);
  let valid: boolean;
  try {
    valid = engine.validateSchema(schema) as boolean;
  } catch {
    return undefined;
  }
  return valid ? undefined : engine.errorsText(engine.errors, { dataVar: 'schema' });
}
