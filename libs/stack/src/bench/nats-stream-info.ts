import { connect } from 'node:net';

/**
 * Messages stored in a JetStream stream, asked over the plain NATS text protocol
 * (`$JS.API.STREAM.INFO.<stream>`), so the bench needs no NATS client of its own. The bench compares
 * it before and after a phase to see how many usage events went out per published message.
 */
export async function jetStreamMessageCount(natsUrl: string, stream: string, timeoutMs = 5_000): Promise<number> {
  const url = new URL(natsUrl.includes('://') ? natsUrl : `nats://${natsUrl}`);
  const inbox = `_INBOX.bench${Math.random().toString(36).slice(2)}`;
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port || 4222) });
    let buffer = '';
    const timer = setTimeout(() => finish(new Error(`no stream info for ${stream} within ${timeoutMs} ms`)), timeoutMs);
    const finish = (error: Error | undefined, count?: number) => {
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else resolve(count!);
    };
    socket.setEncoding('utf8');
    socket.on('error', (error) => finish(error));
    socket.on('data', (text: string) => {
      buffer += text;
      if (buffer.length > 1024 * 1024) return finish(new Error('stream info answer too large'));
      const reply = parseInfoReply(buffer, inbox);
      if (reply === undefined) return;
      if ('error' in reply) finish(new Error(reply.error));
      else finish(undefined, reply.messages);
    });
    socket.write(`CONNECT {"verbose":false,"pedantic":false,"name":"gateway-bench"}\r\nSUB ${inbox} 1\r\nPUB $JS.API.STREAM.INFO.${stream} ${inbox} 0\r\n\r\n`);
  });
}

/** The reply to our inbox in the bytes read so far: undefined while incomplete. */
export function parseInfoReply(buffer: string, inbox: string): { messages: number } | { error: string } | undefined {
  const header = new RegExp(`MSG ${inbox.replaceAll('.', '\\.')} \\d+ (\\d+)\\r\\n`).exec(buffer);
  if (!header) return undefined;
  const start = header.index + header[0].length;
  const size = Number(header[1]);
  // Sizes are bytes; the payload is ASCII JSON, so characters are bytes here.
  if (buffer.length < start + size) return undefined;
  const reply = JSON.parse(buffer.slice(start, start + size)) as { state?: { messages?: number }; error?: { description?: string } };
  if (reply.error) return { error: reply.error.description ?? 'stream info failed' };
  return { messages: Number(reply.state?.messages ?? 0) };
}
