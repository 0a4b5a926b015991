import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Structured JSON logs; child loggers carry `request_id` so one request can be followed across services. */
export function createLogger(service: string, level: string = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ name: service, level, base: { service }, timestamp: pino.stdTimeFunctions.isoTime });
}

export function requestLogger(logger: Logger, requestId: string): Logger {
  return logger.child({ request_id: requestId });
}
