import { spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createLogger, serviceLogger, unredactedLogger } from './logger.js';

const built = fileURLToPath(new URL('../dist/logger.js', import.meta.url));

/** Every line a logger writes to a capturing destination, parsed. */
function capture(): { stream: Writable; lines: () => Record<string, unknown>[]; raw: () => string } {
  let text = '';
  const stream = new Writable({ write(chunk, _encoding, done) { text += String(chunk); done(); } });
  return { stream, raw: () => text, lines: () => text.split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>) };
}

describe('service logs on stdout (buffered, asynchronous)', () => {
  it('writes a line of an idle process within the flush period, and the last line when the process exits', async () => {
    // The child logs one line, idles 1.5 s, logs another and exits at once: the first must arrive long
    // before the second (the periodic flush), the second must arrive at all (pino's flush at exit).
    const script = `
      import { createLogger } from ${JSON.stringify(built)};
      const logger = createLogger('probe', 'info');
      logger.info('first');
      setTimeout(() => { logger.info('last'); process.exit(0); }, 1500);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const arrivals: { text: string; at: number }[] = [];
    child.stdout.on('data', (chunk: Buffer) => arrivals.push({ text: chunk.toString(), at: Date.now() }));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect(code).toBe(0);
    const firstAt = arrivals.find((arrival) => arrival.text.includes('"msg":"first"'))?.at;
    const lastAt = arrivals.find((arrival) => arrival.text.includes('"msg":"last"'))?.at;
    expect(firstAt).toBeDefined();
    expect(lastAt).toBeDefined();
    expect(lastAt! - firstAt!).toBeGreaterThan(1_000);
    const lines = arrivals.map((arrival) => arrival.text).join('').split('\n').filter(Boolean).map((line) => JSON.parse(line) as { msg: string; service: string });
    expect(lines.map((line) => line.msg)).toEqual(['first', 'last']);
    expect(lines.every((line) => line.service === 'probe')).toBe(true);
  });
});

describe('redaction', () => {
  it('redacts credentials on every line but the unredacted sibling, which keeps service and bindings once', () => {
    const { stream, lines, raw } = capture();
    const logger = serviceLogger(createLogger('gateway', 'info', stream), 'edge').child({ shard: 'a' });
    logger.info({ authorization: 'Bearer secret-value', nested: { apiKey: 'key-value' } }, 'redacted');
    const access = unredactedLogger(logger);
    access.info({ route: '/v1/chat/completions', status: 200 }, 'http request');
    const [redacted, accessLine] = lines();
    expect(redacted).toMatchObject({ service: 'edge', shard: 'a', authorization: '[redacted]', nested: { apiKey: '[redacted]' } });
    expect(raw()).not.toContain('secret-value');
    expect(raw()).not.toContain('key-value');
    expect(accessLine).toMatchObject({ service: 'edge', shard: 'a', route: '/v1/chat/completions', status: 200, msg: 'http request' });
    // Each key once: the sibling does not repeat the parent's bindings.
    const second = raw().split('\n')[1]!;
    expect(second.match(/"service":/g)).toHaveLength(1);
    expect(second.match(/"shard":/g)).toHaveLength(1);
  });
});
