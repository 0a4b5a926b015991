import { connect } from 'node:net';

/**
 * JetStream API requests over the plain NATS text protocol, so the bench needs no NATS client of its
 * own: the messages stored in a stream (`$JS.API.STREAM.INFO.<stream>`; compared before and after a
 * phase to see how many usage events went out per published message), and what a durable consumer
 * has not yet acked (`$JS.API.CONSUMER.INFO.<stream>.<durable>`; the ledger has settled a phase once
 * its consumers have nothing pending).
 */
export async function jetStreamMessageCount(natsUrl: string, stream: string, timeoutMs = 5_000): Promise<number> {
  const reply = await jetStreamInfo(natsUrl, `STREAM.INFO.${stream}`, timeoutMs);
  return Number((reply.state as { messages?: number } | undefined)?.messages ?? 0);
}

/** Messages a durable consumer has not acked: not yet delivered plus delivered and unacked. */
export async function consumerBacklog(natsUrl: string, stream: string, durable: string, timeoutMs = 5_000): Promise<number> {
  const reply = await jetStreamInfo(natsUrl, `CONSUMER.INFO.${stream}.${durable}`, timeoutMs);
  return Number(reply.num_pending ?? 0) + Number(reply.num_ack_pending ?? 0);
}

async function jetStreamInfo(natsUrl: string, api: string, timeoutMs: number): Promise<Record<string, unknown>> {
  const url = new URL(natsUrl.includes('://') ? natsUrl : `nats://${natsUrl}`);
  const inbox = `_INBOX.bench${Math.random().toString(36).slice(2)}`;
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port || 4222) });
    let buffer = '';
    const timer = setTimeout(() => finish(new Error(`no answer to ${api} within ${timeoutMs} ms`)), timeoutMs);
    const finish = (error: Error | undefined, reply?: Record<string, unknown>) => {
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else resolve(reply!);
    };
    socket.setEncoding('utf8');
    socket.on('error', (error) => finish(error));
    socket.on('data', (text: string) => {
      buffer += text;
      if (buffer.length > 1024 * 1024) return finish(new Error(`${api} answer too large`));
      const reply = parseApiReply(buffer, inbox);
      if (reply === undefined) return;
      if ('error' in reply) finish(new Error(reply.error));
      else finish(undefined, reply.body);
    });
    socket.write(`CONNECT {"verbose":false,"pedantic":false,"name":"gateway-bench"}\r\nSUB ${inbox} 1\r\nPUB $JS.API.${api} ${inbox} 0\r\n\r\n`);
  });
}

/** Stream info's message count from the bytes read so far: undefined while incomplete. */
export function parseInfoReply(buffer: string, inbox: string): { messages: number } | { error: string } | undefined {
  const reply = parseApiReply(buffer, inbox);
  if (reply === undefined || 'error' in reply) return reply;
  return { messages: Number((reply.body.state as { messages?: number } | undefined)?.messages ?? 0) };
}

/** The JSON reply to our inbox in the bytes read so far: undefined while incomplete. */
function parseApiReply(buffer: string, inbox: string): { body: Record<string, unknown> } | { error: string } | undefined {
  const header = new RegExp(`MSG ${inbox.replaceAll('.', '\\.')} \\d+ (\\d+)\\r\\n`).exec(buffer);
  if (!header) return undefined;
  const start = header.index + header[0].length;
  const size = Number(header[1]);
  // Sizes are bytes; the payload is ASCII JSON, so characters are bytes here.
  if (buffer.length < start + size) return undefined;
  const reply = JSON.parse(buffer.slice(start, start + size)) as Record<string, unknown> & { error?: { description?: string } };
  if (reply.error) return { error: reply.error.description ?? 'JetStream API request failed' };
  return { body: reply };
}
