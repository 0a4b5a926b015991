import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

/**
 * Credentials never reach a log line, whatever object a caller passes: these paths are replaced
 * before the line is written (belt and braces: no code logs headers or keys on purpose).
 */
const REDACTED_PATHS = [
  'authorization', '*.authorization', 'headers.authorization', '*.headers.authorization',
  'x-api-key', '*["x-api-key"]', '*.headers["x-api-key"]',
  'apiKey', '*.apiKey', 'api_key', '*.api_key',
  'provisioningKey', '*.provisioningKey', 'provisioning_key', '*.provisioning_key',
  'key', 'secret', '*.secret', 'password', '*.password',
];

function loggerOptions(service: string, level: string, redact = true): LoggerOptions {
  return {
    name: service,
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(redact ? { redact: { paths: REDACTED_PATHS, censor: '[redacted]' } } : {}),
  };
}

/**
 * Structured JSON logs; child loggers carry `request_id` so one request can be followed across
 * services. `destination`: where lines go (default stdout); tests capture them with a stream.
 *
 * Stdout is written asynchronously and in blocks (sonic-boom: `sync: false`, up to 12 KiB gathered, and
 * whatever is gathered written at least every 100 ms): with a line per request (the edge's access log)
 * a write per line cost the edge ~10 % of its CPU at max load and more at 500 req/s, and a write per
 * 4 KiB still ~7 % of it at max load on a busy machine (docs/performance.md, issue 39). A line can thus
 * show up to 100 ms late; pino flushes what is left when the process exits, also on process.exit(), so
 * only a SIGKILL can lose the last lines.
 */
/** Gathered before a write: below sonic-boom's 16 KiB `maxWrite`, the most one write takes. */
const LOG_BLOCK_BYTES = 12 * 1024;

export function createLogger(service: string, level: string = process.env.LOG_LEVEL ?? 'info', destination?: DestinationStream): Logger {
  const options = loggerOptions(service, level);
  if (destination) return pino(options, destination);
  // A silent logger (tests) writes nothing: no buffer and no flush timer for it.
  if (level === 'silent') return pino(options);
  return pino(options, pino.destination({ dest: 1, sync: false, minLength: LOG_BLOCK_BYTES, periodicFlush: 100 }));
}

/**
 * The logger of one service of a process that runs several (npm start, tests): its lines name that
 * service once. A pino child would append a second `service` key after the parent's, and a line
 * with a repeated key means different things to different log parsers; so this is a sibling of the
 * parent, on the parent's destination and level, with the parent's other bindings.
 */
export function serviceLogger(parent: Logger, service: string): Logger {
  const bindings = parent.bindings();
  if (!('service' in bindings) && !('name' in bindings)) return parent.child({ service });
  return siblingOf(parent, service, true);
}

/**
 * A sibling of `parent` (same destination, level and bindings) that skips the redaction pass: for
 * lines whose every field the gateway builds itself from known-safe values, one per request (the
 * edge's access line: route, status, model, provider, timings, ids). Redaction walks every line
 * against each path and was the costliest part of writing one. Never pass it caller-supplied objects.
 */
export function unredactedLogger(parent: Logger): Logger {
  const { service, name } = parent.bindings() as { service?: string; name?: string };
  return siblingOf(parent, service ?? name ?? 'gateway', false);
}

/** A new pino logger on `parent`'s destination and level, named `service`, with the parent's other bindings. */
function siblingOf(parent: Logger, service: string, redact: boolean): Logger {
  const { service: _service, name: _name, ...rest } = parent.bindings();
  const stream = (parent as unknown as Record<symbol, DestinationStream>)[pino.symbols.streamSym];
  const sibling = pino(loggerOptions(service, parent.level, redact), stream);
  return Object.keys(rest).length > 0 ? sibling.child(rest) : sibling;
}

export function requestLogger(logger: Logger, requestId: string): Logger {
  return logger.child({ request_id: requestId });
}
