import type { Logger } from 'pino';
import { ConfigError } from './config.js';

export interface Stoppable {
  stop(): Promise<void>;
}

/**
 * Entry point shared by every service's main.ts: starts it, stops it cleanly on SIGINT/SIGTERM, and
 * turns a start-up failure into one readable line and exit code 1.
 */
export async function runMain(name: string, logger: Logger, start: () => Promise<Stoppable>): Promise<void> {
  let running: Stoppable;
  try {
    running = await start();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${name}: ${error.message}\n`);
    } else {
      logger.fatal({ err: error }, `${name} failed to start`);
    }
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) { process.exit(130); }
    stopping = true;
    logger.info({ signal }, `${name} stopping`);
    running.stop().then(() => process.exit(0), (error: unknown) => {
      logger.error({ err: error }, 'unclean stop');
      process.exit(1);
    });
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}
