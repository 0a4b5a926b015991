import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBus, createTestDatabase, eventually, natsUrl, type TestBus, type TestDatabase, testInternalAuthEnv } from '@gateway/testing';
import { freePort } from '../src/index.js';
import { root, type Service, type Manifest, type Renderer, locateRenderer, shellWords, documentedInstalls, parseManifests, schemaProblems, componentOf, selects, workloadOf, containerOf, envValue, describeRules, METRICS_PORT, checkRelease } from './helm-chart-support.js';

// The chart's renderer, the README's install commands, the schema checks and the chart rules: helm-chart-support.ts.
describe('helm chart', () => {
  let renderer: Renderer;
  const installs = documentedInstalls();

  beforeAll(() => {
    renderer = locateRenderer();
  }, 120_000);

  const renderOk = (args: readonly string[]) => {
    const result = renderer.render(args);
    expect(result.status, `${renderer.describe} ${args.join(' ')}\n${result.stderr}`).toBe(0);
    return parseManifests(result.stdout);
  };

  it('passes its static checks', () => {
    const result = spawnSync(process.execPath, ['helm/gateway/ci/check-chart.mjs'], { cwd: root, encoding: 'utf8' });
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
  });

  it('renders with the default values into valid Kubernetes objects that follow the chart rules', () => {
    const manifests = renderOk(['gw', 'helm/gateway']);
    checkRelease(manifests, 'defaults');
    const kinds = manifests.map((manifest) => manifest.kind);
    expect(kinds.filter((kind) => kind === 'HorizontalPodAutoscaler')).toHaveLength(6);
    expect(kinds, 'Ingress is off by default').not.toContain('Ingress');
    expect(kinds, 'the chart creates no Secret unless devSecrets.enabled').not.toContain('Secret');
  });

  it("renders every `helm install` command of deploy/README.md's Helm section", () => {
    expect(installs.length, 'the README documents a production and a throwaway install').toBeGreaterThanOrEqual(2);
    for (const install of installs) {
      const manifests = renderOk(install.args);
      checkRelease(manifests, install.command.slice(0, 80));
    }
    const [production, throwaway] = installs.map((install) => renderOk(install.args));
    const catalogConfig = production!.find((manifest) => manifest.kind === 'ConfigMap')!;
    expect(Object.keys(catalogConfig.data).length, 'the example config and its three icons').toBe(4);
    expect(throwaway!.map((manifest) => manifest.kind)).toEqual(expect.arrayContaining(['Ingress', 'Job', 'Secret']));
  });

  it("the one-off gatewayctl pod of deploy/README.md is a valid Pod like the chart's gatewayctl Job, admitted to auth, catalog and ledger", () => {
    const readme = readFileSync(`${root}deploy/README.md`, 'utf8').replace(/\\\n\s*/g, ' ');
    const line = readme.split('\n').find((text) => text.startsWith('kubectl -n gateway run gatewayctl-once '));
    expect(line, 'deploy/README.md documents `kubectl -n gateway run gatewayctl-once`').toBeDefined();
    const words = shellWords(line!);
    const flag = (name: string) => words.find((word) => word.startsWith(`--${name}=`))?.slice(name.length + 3);
    const overrides = JSON.parse(flag('overrides')!) as { apiVersion: string; spec: any };
    const labels = Object.fromEntries(flag('labels')!.split(',').map((pair) => pair.split('='))) as Record<string, string>;
    // What `kubectl run` sends: its generated Pod with the overrides merged in.
    const pod: Manifest = { kind: 'Pod', metadata: { name: words[4]!, labels }, ...overrides, spec: { restartPolicy: 'Never', ...overrides.spec } };
    expect(schemaProblems(pod)).toEqual([]);
    const container = pod.spec.containers[0];
    expect(container.image).toBe(flag('image'));

    // The README's production install (release gw, namespace gateway) with the Job on: the pod runs the
    // Job's image with the Job's addresses and admin credential, and every admin service admits its labels.
    const manifests = renderOk([...installs[0]!.args, '--set', 'gatewayctl.job.enabled=true']);
    const job = containerOf(workloadOf(manifests, 'gatewayctl'), 'gatewayctl');
    expect(container.image).toBe(job.image);
    expect(job.image).toMatch(/-gatewayctl:/);
    const byName = (env: any[]) => Object.fromEntries(env.filter((entry) => entry.name !== 'LOG_LEVEL').map((entry) => [entry.name, entry.value ?? entry.valueFrom]));
    expect(byName(container.env)).toEqual(byName(job.env));
    for (const component of ['auth', 'catalog', 'ledger']) {
      const policy = manifests.find((manifest) => manifest.kind === 'NetworkPolicy' && componentOf(manifest.metadata.labels) === component)!;
      const admitted = (policy.spec.ingress as any[]).some((rule) => (rule.from ?? []).some((peer: any) => selects(peer.podSelector?.matchLabels, labels)));
      expect(admitted, `${component} admits the pod's labels`).toBe(true);
    }
  });

  it('honours the switches: fixed replicas, no policies, an emptyDir outbox, the routing ClusterIP address', () => {
    const manifests = renderOk([
      'gw', 'helm/gateway', '--set', 'edge.hpa.enabled=false', '--set', 'edge.replicas=3', '--set', 'networkPolicy.enabled=false',
      '--set', 'routing.outbox.persistence.enabled=false', '--set', 'edge.routerHeadless=false', '--set', 'auth.pdb.minAvailable=50%',
    ]);
    for (const manifest of manifests) expect(schemaProblems(manifest), `${manifest.kind} ${manifest.metadata.name}`).toEqual([]);
    const edge = workloadOf(manifests, 'edge');
    expect(edge.spec.replicas).toBe(3);
    expect(manifests.filter((manifest) => manifest.kind === 'HorizontalPodAutoscaler').map((hpa) => hpa.spec.scaleTargetRef.name)).not.toContain(edge.metadata.name);
    expect(manifests.map((manifest) => manifest.kind)).not.toContain('NetworkPolicy');
    const routing = workloadOf(manifests, 'routing');
    expect(routing.spec.volumeClaimTemplates).toBeUndefined();
    expect(routing.spec.template.spec.volumes.find((volume: any) => volume.name === 'usage-outbox')).toEqual({ name: 'usage-outbox', emptyDir: {} });
    // Off: the routing ClusterIP Service (connections balanced, not calls).
    expect(envValue(containerOf(edge, 'edge'), 'ROUTER_ADDR')).toBe('gw-gateway-routing:50054');
    const authPdb = manifests.find((manifest) => manifest.kind === 'PodDisruptionBudget' && componentOf(manifest.metadata.labels) === 'auth');
    expect(authPdb?.spec).toMatchObject({ minAvailable: '50%' });
    expect(authPdb?.spec.maxUnavailable).toBeUndefined();

    // Tracing on: every service may reach the collector's port.
    const traced = renderOk(['gw', 'helm/gateway', '--set', 'otel.endpoint=http://otel-collector.observability:4318']);
    for (const policy of traced.filter((manifest) => manifest.kind === 'NetworkPolicy')) {
      expect(schemaProblems(policy)).toEqual([]);
      expect(describeRules(policy.spec.egress, 'to'), policy.metadata.name).toContain('*:4318/TCP');
    }
  });

  it('refuses bad values before rendering (values.schema.json) and inconsistent ones in the templates', () => {
    const refusals: [string[], RegExp][] = [
      [['--set', 'edge.port=http'], /edge\.port: Invalid type\. Expected: integer, given: string|edge\/port/],
      [['--set', 'logLevel=loud'], /logLevel/],
      [['--set', 'auth.hpa.minReplicas=0'], /auth\.hpa\.minReplicas|auth\/hpa\/minReplicas/],
      [['--set', 'edge.replica=3'], /replica/],
      [['--set', 'image.repository='], /image\.repository|image\/repository/],
      [['--set', 'image.pullPolicy=Sometimes'], /pullPolicy/],
      [['--set', 'routing.outbox.persistence.whenScaled=Keep'], /whenScaled/],
      [['--set', 'routing.outbox.persistence.size=lots'], /size/],
      [['--set', 'catalog.port=70000'], /catalog\.port|catalog\/port/],
      [['--set', 'devSecrets.enabled=true', '--set', 'devSecrets.postgresUrl=mysql://db/gateway', '--set', 'devSecrets.keyHashSecret=short'], /postgresUrl|keyHashSecret/],
      [['--set', 'ingress.enabled=true', '--set', 'ingress.hosts=null'], /hosts/],
      [['--set', 'networkPolicy.nats.port=0'], /nats\.port|nats\/port/],
      [['--set', 'topologySpread.whenUnsatisfiable=Sometimes'], /whenUnsatisfiable/],
      [['--set-string', 'catalogFiles./etc/passwd=x'], /catalogFiles/],
      // Templates: consistency a schema cannot express.
      [['--set', 'media.hpa.minReplicas=5', '--set', 'media.hpa.maxReplicas=2'], /media\.hpa: minReplicas 5 is above maxReplicas 2/],
      // The README's install before icons were mounted: the catalog would not start; now helm says why.
      [['--set-file', 'catalogConfig=deploy/config/gateway.example.yaml'], /startups\[0\]\.icon_svg names "startups\/acme\.svg", which catalogFiles does not hold/],
    ];
    for (const [values, message] of refusals) {
      const result = renderer.render(['gw', 'helm/gateway', ...values]);
      expect(result.status, `${values.join(' ')} must be refused`).not.toBe(0);
      expect(result.stderr, values.join(' ')).toMatch(message);
    }
  });

  it('the schema checks found nothing only because the documents are right (a wrong one is caught)', () => {
    const [deployment] = renderOk(['gw', 'helm/gateway']).filter((manifest) => manifest.kind === 'Deployment');
    const misspelt = structuredClone(deployment!);
    misspelt.spec.template.spec.topologySpreadConstraint = misspelt.spec.template.spec.topologySpreadConstraints;
    delete misspelt.spec.template.spec.topologySpreadConstraints;
    expect(schemaProblems(misspelt)).toEqual(['unknown field /spec/template/spec/topologySpreadConstraint']);
    const mistyped = structuredClone(deployment!);
    mistyped.spec.template.spec.containers[0].ports[0].containerPort = '8080';
    expect(schemaProblems(mistyped).join()).toMatch(/containerPort must be integer/);
  });

  describe('the catalog on the files its pod would see', () => {
    let database: TestDatabase;
    let bus: TestBus;
    let scratch: string;
    const children: ChildProcess[] = [];
    const HealthClient = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

    beforeAll(async () => {
      database = await createTestDatabase();
      bus = await createTestBus('nats');
      scratch = mkdtempSync(join(tmpdir(), 'helm-catalog-'));
    }, 60_000);

    afterAll(async () => {
      for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
      await Promise.all(children.map((child) => (child.exitCode === null ? new Promise((resolve) => child.once('exit', resolve)) : undefined)));
      await bus?.destroy();
      await database?.drop();
      rmSync(scratch, { recursive: true, force: true });
    });

    /** Lays the catalog volume out under a stand-in container root and starts the catalog with the rendered env. */
    async function startRenderedCatalog(rootName: string, manifests: Manifest[], leaveOut?: string) {
      const { catalogDirectory, catalogFiles, configPath, catalogContainer } = checkRelease(manifests, rootName);
      const containerRoot = join(scratch, rootName);
      for (const [path, content] of catalogFiles) {
        if (path === leaveOut) continue;
        const file = join(containerRoot, catalogDirectory, path);
        mkdirSync(dirname(file), { recursive: true });
        writeFileSync(file, content);
      }
      const address = `127.0.0.1:${await freePort()}`;
      const env: Record<string, string> = { PATH: process.env.PATH ?? '' };
      for (const entry of catalogContainer.env) if (typeof entry.value === 'string') env[entry.name] = entry.value;
      // What the cluster would supply: the Secret's URL, a reachable NATS, a local listen address.
      Object.assign(env, {
        DATABASE_URL: database.url, NATS_URL: natsUrl, NATS_NAMESPACE: bus.namespace, GRPC_LISTEN: address, LOG_LEVEL: 'warn',
        GATEWAY_CONFIG: join(containerRoot, configPath),
        // The chart's Secret refs (not values), supplied here as the kubelet would.
        ...testInternalAuthEnv,
        // Every pod has its own network namespace; here the processes share one, so no fixed metrics port.
        METRICS_PORT: '',
      });
      const child = spawn(process.execPath, ['apps/catalog/dist/main.js'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk));
      child.stderr!.on('data', (chunk: Buffer) => (output += chunk));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      return { address, exited, output: () => output };
    }

    const serving = (address: string) =>
      new Promise<boolean>((resolve, reject) => {
        const client = new HealthClient(address, credentials.createInsecure());
        const check = (client as unknown as { check: (request: object, options: object, callback: (error: Error | null, response?: { status: unknown }) => void) => void }).check;
        check.call(client, { service: '' }, { deadline: Date.now() + 1_000 }, (error, response) => {
          client.close();
          if (error) reject(error);
          else resolve(response?.status === 1 || response?.status === 'SERVING');
        });
      });

    it('starts with the documented production install, and fails without an icon it names', async () => {
      const production = renderOk(installs[0]!.args);
      const started = await startRenderedCatalog('complete', production);
      await eventually(async () => expect(await serving(started.address)).toBe(true), 30_000, 200).catch((error) => {
        throw new Error(`the catalog did not start on the rendered files: ${error}\n${started.output()}`);
      });

      // The original failure, reproduced: the same files less one icon stop the catalog at start.
      const missing = await startRenderedCatalog('missing-icon', production, 'startups/nebula.svg');
      expect(await missing.exited).not.toBe(0);
      expect(missing.output()).toMatch(/startups\[1\]\.icon_svg/);
    }, 60_000);
  });
});
