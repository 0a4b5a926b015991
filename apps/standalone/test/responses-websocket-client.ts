import WebSocket from 'ws';

// The client side of the responses WebSocket, shared by the e2e tests that drive it with a real `ws`
// socket: every message kept in order and parsed as one JSON event, read one response at a time.

export type WsEvent = { type: string; sequence_number?: number; [field: string]: any };

/** A client socket: every message kept in order, each parsed as one JSON event. */
export class WsClient {
  readonly events: WsEvent[] = [];
  private waiters: Array<() => void> = [];
  closedWith: { code: number; reason: string } | undefined;
  private read = 0;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      this.events.push(JSON.parse(data.toString()) as WsEvent);
      for (const waiter of this.waiters.splice(0)) waiter();
    });
    ws.on('close', (code, reason) => {
      this.closedWith = { code, reason: reason.toString() };
      for (const waiter of this.waiters.splice(0)) waiter();
    });
  }

  static open(url: string, apiKey: string): Promise<WsClient> {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${apiKey}` } });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new WsClient(ws)));
      ws.once('error', reject);
      ws.once('unexpected-response', (_request, response) => reject(new Error(`upgrade refused: ${response.statusCode}`)));
    });
  }

  send(message: Record<string, unknown>): void {
    this.ws.send(JSON.stringify({ type: 'response.create', ...message }));
  }

  /** The events of the next response: up to its terminal event (completed, incomplete, or error). */
  async turn(): Promise<WsEvent[]> {
    for (;;) {
      const end = this.events.findIndex((event, index) => index >= this.read && ['response.completed', 'response.incomplete', 'error'].includes(event.type));
      if (end >= 0) {
        const events = this.events.slice(this.read, end + 1);
        this.read = end + 1;
        return events;
      }
      if (this.closedWith) throw new Error(`socket closed (${this.closedWith.code}) before a terminal event`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Waits for the first event of this type from now on. */
  async until(type: string): Promise<WsEvent> {
    for (;;) {
      const found = this.events.slice(this.read).find((event) => event.type === type);
      if (found) return found;
      if (this.closedWith) throw new Error(`socket closed before ${type}`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  close(): Promise<void> {
    if (this.closedWith) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close();
    });
  }
}

/** The status, JSON body and Retry-After of a refused upgrade; an accepted one is closed and fails the call. */
export function refusedUpgrade(url: string, headers: Record<string, string>): Promise<{ status: number; body: any; retryAfter: string | undefined }> {
  const ws = new WebSocket(url, { headers });
  return new Promise((resolve, reject) => {
    ws.once('open', () => {
      ws.close();
      reject(new Error('the upgrade was accepted'));
    });
    ws.once('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text), retryAfter: response.headers['retry-after'] as string | undefined }));
    });
    ws.once('error', () => undefined);
  });
}
