import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * `gatewayctl` as an operator runs it: its bin (`apps/gatewayctl/bin/gatewayctl.js`, over the built
 * dist) in a process of its own, configured by `env` only (plus PATH) — the bench and the integration
 * tests under test/ (stack-harness.ts's `gatewayctl`) reach the admin API the way a user does, not by
 * loading the CLI's code into their own process (no app imports another app).
 */
const gatewayctlBin = fileURLToPath(new URL('../../../gatewayctl/bin/gatewayctl.js', import.meta.url));

export interface GatewayctlResult { code: number; stdout: string; stderr: string }

export function runGatewayctlProcess(argv: readonly string[], env: Record<string, string>, timeoutMs = 60_000): Promise<GatewayctlResult> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [gatewayctlBin, ...argv], { env: { PATH: process.env.PATH ?? '', ...env }, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') return reject(new Error(`gatewayctl ${argv.join(' ')}: ${error.message}\n${stderr}`));
        resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
      });
  });
}

/** Runs a `--json` command and returns its object; throws with its stderr when it exits non-zero. */
export async function gatewayctlJson(argv: readonly string[], env: Record<string, string>): Promise<Record<string, string>> {
  const result = await runGatewayctlProcess(argv, env);
  if (result.code !== 0) throw new Error(`gatewayctl ${argv.join(' ')} exited ${result.code}: ${result.stderr}${result.stdout}`);
  return JSON.parse(result.stdout) as Record<string, string>;
}
