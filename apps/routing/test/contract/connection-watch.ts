import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A loopback TCP relay in front of a fake upstream: the adapter connects here, every byte goes on to the
 * fake unchanged (headers, Host and signatures included), and the relay notes when the adapter's side of
 * a connection closes. That is how the contract sees, from the upstream's side, that an aborted stream
 * really closed its request: the fake gets the close too, because the relay passes it on.
 */
export interface ConnectionWatch {
  /** host:port of the relay (http://<address> is the base URL the adapter is given). */
  readonly address: string;
  /** The connection that most recently carried bytes from the adapter (the one a request in flight uses). */
  lastActive(): WatchedConnection | undefined;
  close(): Promise<void>;
}

export interface WatchedConnection {
  /** When the adapter closed it (Date.now()), undefined while open. */
  closedAt: number | undefined;
  /** Resolves with closedAt once closed, or undefined after `timeoutMs`. */
  waitClosed(timeoutMs: number): Promise<number | undefined>;
}

class Connection implements WatchedConnection {
  closedAt: number | undefined = undefined;
  private readonly waiters: Array<(at: number) => void> = [];

  markClosed() {
    if (this.closedAt !== undefined) return;
    this.closedAt = Date.now();
    for (const waiter of this.waiters.splice(0)) waiter(this.closedAt);
  }

  waitClosed(timeoutMs: number): Promise<number | undefined> {
    if (this.closedAt !== undefined) return Promise.resolve(this.closedAt);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(undefined), timeoutMs);
      this.waiters.push((at) => { clearTimeout(timer); resolve(at); });
    });
  }
}

export async function startConnectionWatch(targetPort: number): Promise<ConnectionWatch> {
  const sockets = new Set<Socket>();
  let last: Connection | undefined;
  const server: Server = createServer((client) => {
    const watched = new Connection();
    const upstream = connect(targetPort, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    client.on('data', (chunk) => {
      last = watched;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => client.write(chunk));
    const clientGone = () => {
      watched.markClosed();
      upstream.destroy();
      sockets.delete(client);
    };
    client.on('end', clientGone);
    client.on('close', clientGone);
    client.on('error', clientGone);
    const upstreamGone = () => {
      client.destroy();
      sockets.delete(upstream);
    };
    upstream.on('close', upstreamGone);
    upstream.on('error', upstreamGone);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    lastActive: () => last,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The port of an http://host:port/... URL. */
export function portOf(url: string): number {
  return Number(new URL(url).port);
}
