// `npm start` runs this first: builds every project through nx (cached, so a second start is quick).
import { spawnSync } from 'node:child_process';

const result = spawnSync('npx', ['nx', 'run-many', '-t', 'build', '--output-style=static'], {
  stdio: ['ignore', 'inherit', 'inherit'],
  env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true' },
});
if (result.status !== 0) {
  process.stderr.write('build failed: see the output above\n');
  process.exit(result.status ?? 1);
}
