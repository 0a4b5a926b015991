import { createInterface } from 'node:readline';
import { runLoad, type LoadJob } from './load-generator.js';

/**
 * The load generator in its own process, so its CPU never mixes with what is measured.
 * argv[2]: a LoadJob as JSON. After the warm-up prints `{"event":"warm"}` and waits for a `go` line
 * on stdin (the orchestrator takes its CPU snapshot in between), then prints
 * `{"event":"result","result":{...}}` and exits when stdin closes.
 */
const job = JSON.parse(process.argv[2] ?? '{}') as LoadJob;
const line = (value: object) => process.stdout.write(`${JSON.stringify(value)}\n`);
const input = createInterface({ input: process.stdin });
const go = new Promise<void>((resolve, reject) => {
  input.on('line', (text) => { if (text.trim() === 'go') resolve(); });
  input.on('close', () => reject(new Error('the orchestrator went away')));
});
go.catch(() => undefined);
try {
  const result = await runLoad(job, async () => {
    line({ event: 'warm' });
    await go;
  });
  line({ event: 'result', result });
  process.exitCode = 0;
} catch (error) {
  line({ event: 'failed', message: error instanceof Error ? error.stack ?? error.message : String(error) });
  process.exitCode = 1;
}
// Stays alive (idle) until the orchestrator closes stdin, so its CPU can be read after the result.
