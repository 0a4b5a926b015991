import { runGatewayctl } from '../src/index.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs gatewayctl in-process with captured output and only the given environment. */
export async function cli(argv: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await runGatewayctl(argv, {
    env,
    stdout: (text) => { stdout += text; },
    stderr: (text) => { stderr += text; },
  });
  return { code, stdout, stderr };
}
