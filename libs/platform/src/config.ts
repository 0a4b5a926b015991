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
