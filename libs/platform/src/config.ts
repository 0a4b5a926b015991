import { z } from 'zod';

/** Thrown at start-up when the environment is unusable; lists every bad variable at once. */
export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Reads a service's settings from the environment through a zod object schema whose keys are the
 * variable names. Every problem is reported together, naming the variable and why.
 */
export function loadConfig<Shape extends z.ZodRawShape>(
  shape: Shape,
  env: NodeJS.ProcessEnv = process.env,
): z.infer<z.ZodObject<Shape>> {
  const result = z.object(shape).safeParse(env);
  if (result.success) return result.data;
  throw new ConfigError(result.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`));
}

/** host:port, as grpc-js listens on and dials. */
export const grpcAddress = z
  .string()
  .regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'expected host:port');

export const postgresUrl = z.string().regex(/^postgres(ql)?:\/\//, 'expected a postgres:// URL');
export const natsUrl = z.string().regex(/^(nats|tls):\/\/|^[A-Za-z0-9.-]+:\d+$/, 'expected nats://host:port');

/** Settings every service shares. */
export const commonEnv = {
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
};

/**
 * Internal gRPC authentication (docs/operations.md "Internal authentication"). Tokens are comma-separated so a
 * rotation can accept the new and the old at once; clients send the first.
 */
export const internalAuthEnv = {
  GATEWAY_INTERNAL_TOKEN: z.string().optional().transform((value) => value || undefined),
  GATEWAY_ADMIN_TOKEN: z.string().optional().transform((value) => value || undefined),
  /** 'required' (default): no start without both tokens; 'off': calls unchecked (a network you trust). */
  GATEWAY_INTERNAL_AUTH: z.enum(['required', 'off']).default('required'),
};

const MIN_TOKEN_LENGTH = 32;

/**
 * What a service binary's servers accept and its clients present, from `internalAuthEnv`; undefined
 * when authentication is off. The admin token is required only where `adminRpcs` (auth, ledger,
 * catalog): the edge, routing and media never hold it. Throws a ConfigError naming what is missing.
 */
export function internalAuthFromEnv(
  config: {
    GATEWAY_INTERNAL_TOKEN?: string | undefined;
    GATEWAY_ADMIN_TOKEN?: string | undefined;
    GATEWAY_INTERNAL_AUTH: 'required' | 'off';
  },
  adminRpcs: boolean,
): { accepted: { service: string[]; admin: string[] }; credential: string } | undefined {
  if (config.GATEWAY_INTERNAL_AUTH === 'off') return undefined;
  const split = (value: string | undefined) => (value ?? '').split(',').map((token) => token.trim()).filter((token) => token.length > 0);
  const service = split(config.GATEWAY_INTERNAL_TOKEN);
  const admin = split(config.GATEWAY_ADMIN_TOKEN);
  const problems: string[] = [];
  for (const [name, tokens] of [['GATEWAY_INTERNAL_TOKEN', service], ['GATEWAY_ADMIN_TOKEN', admin]] as const) {
    if (tokens.length === 0 && name === 'GATEWAY_ADMIN_TOKEN' && !adminRpcs) continue;
    if (tokens.length === 0) problems.push(`${name}: required (or GATEWAY_INTERNAL_AUTH=off on a network you trust)`);
    else if (tokens.some((token) => token.length < MIN_TOKEN_LENGTH)) problems.push(`${name}: every token needs at least ${MIN_TOKEN_LENGTH} characters`);
  }
  if (problems.length === 0 && service.some((token) => admin.includes(token))) problems.push('GATEWAY_ADMIN_TOKEN: must differ from GATEWAY_INTERNAL_TOKEN');
  if (problems.length > 0) throw new ConfigError(problems);
  return { accepted: { service, admin }, credential: service[0]! };
}

/**
 * A gRPC target that may name several servers (the edge's ROUTER_ADDR): `host:port`; `ipv4:a:p,b:p`
 * (grpc-js's static list); or `dns:///name:port` (every address the name resolves to, e.g. a
 * Kubernetes headless Service). docs/running.md "Edge to routing: client-side balancing".
 */
export const grpcTarget = z.string().refine((value) => parseGrpcTarget(value) !== undefined, 'expected host:port, ipv4:host:port,host:port or dns:///name:port');

export type GrpcTarget =
  | { kind: 'single'; address: string }
  | { kind: 'static'; addresses: string[] }
  | { kind: 'dns'; host: string; port: number };

const HOST_PORT = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

/** The servers a target names; undefined when it is none of the three forms. */
export function parseGrpcTarget(value: string): GrpcTarget | undefined {
  if (value.startsWith('dns:///')) {
    const match = HOST_PORT.exec(value.slice('dns:///'.length));
    if (!match || Number(match[2]) > 65_535) return undefined;
    return { kind: 'dns', host: match[1]!, port: Number(match[2]) };
  }
  if (value.startsWith('ipv4:') || value.startsWith('ipv6:')) {
    const addresses = value.slice(5).split(',');
    if (addresses.length === 0 || addresses.some((address) => !HOST_PORT.test(address) || Number(HOST_PORT.exec(address)![2]) > 65_535)) return undefined;
    return { kind: 'static', addresses };
  }
  const match = HOST_PORT.exec(value);
  if (!match || Number(match[2]) > 65_535) return undefined;
  return { kind: 'single', address: value };
}
