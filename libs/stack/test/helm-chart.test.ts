import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import * as appsV1 from 'kubernetes-models/apps/v1';
import * as autoscalingV2 from 'kubernetes-models/autoscaling/v2';
import * as batchV1 from 'kubernetes-models/batch/v1';
import * as networkingV1 from 'kubernetes-models/networking.k8s.io/v1';
import * as policyV1 from 'kubernetes-models/policy/v1';
import * as coreV1 from 'kubernetes-models/v1';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { createTestBus, createTestDatabase, eventually, natsUrl, type TestBus, type TestDatabase, testInternalAuthEnv } from '@gateway/testing';
import { freePort } from '../src/index.js';

// The chart rendered by a real Go template engine — helm when it is on PATH, otherwise chart-render
// (helm/gateway/ci/renderer: text/template + sprig + sigs.k8s.io/yaml + gojsonschema from Debian, the
// libraries helm is made of) — for the default values and for every `helm install` command of
// deploy/README.md's Helm section, exactly as written there. Every document is checked against the
// Kubernetes API schemas (kubernetes-models), unknown fields included, and against the chart's rules.
const root = fileURLToPath(new URL('../../../', import.meta.url));
const SERVICES = ['edge', 'auth', 'catalog', 'ledger', 'routing', 'media'] as const;
type Service = (typeof SERVICES)[number];

// Rendered manifests are untyped JSON; the checks below read them as such.
type Manifest = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [field: string]: any };

interface Renderer {
  describe: string;
  render(args: readonly string[]): { status: number | null; stdout: string; stderr: string };
}

function locateRenderer(): Renderer {
  const helm = spawnSync('helm', ['version', '--short'], { encoding: 'utf8' });
  if (helm.status === 0) {
    return {
      describe: `helm ${helm.stdout.trim()}`,
      render: (args) => spawnSync('helm', ['template', ...args], { cwd: root, encoding: 'utf8' }),
    };
  }
  const build = spawnSync('bash', ['helm/gateway/ci/renderer/build.sh'], { cwd: root, encoding: 'utf8' });
  if (build.status !== 0) {
    throw new Error(`no helm on PATH, and chart-render did not build (helm/gateway/ci/install-renderer-deps.sh installs its packages):\n${build.stderr}`);
  }
  const binary = build.stdout.trim();
  return { describe: 'chart-render', render: (args) => spawnSync(binary, [...args], { cwd: root, encoding: 'utf8' }) };
}

// Stand-ins for the command substitutions the README's commands use (the rendered output must not
// depend on them beyond their shape).
const SUBSTITUTIONS: Record<string, string> = { '$(openssl rand -hex 32)': 'c0ffee'.repeat(10) + 'c0de' };

/** Splits one shell command line into words: '…', "…", backslash escapes, known $(…) stand-ins. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  for (let index = 0; index < line.length; index++) {
    const character = line[index]!;
    if (character === '$') {
      const substitution = Object.keys(SUBSTITUTIONS).find((text) => line.startsWith(text, index));
      if (!substitution) throw new Error(`README command uses ${line.slice(index, index + 30)}…, which the test has no stand-in for`);
      word = (word ?? '') + SUBSTITUTIONS[substitution];
      index += substitution.length - 1;
    } else if (character === "'") {
      const end = line.indexOf("'", index + 1);
      word = (word ?? '') + line.slice(index + 1, end);
      index = end;
    } else if (character === '"') {
      const end = line.indexOf('"', index + 1);
      const inner = line.slice(index + 1, end);
      if (inner.includes('$') || inner.includes('\\')) throw new Error(`README command: expansions inside "${inner}" are not supported by the test`);
      word = (word ?? '') + inner;
      index = end;
    } else if (character === '\\') {
      word = (word ?? '') + line[index + 1];
      index += 1;
    } else if (/\s/.test(character)) {
      if (word !== null) words.push(word);
      word = null;
    } else {
      word = (word ?? '') + character;
    }
  }
  if (word !== null) words.push(word);
  return words;
}

/** The `helm install` commands of deploy/README.md's Helm section, as helm would receive their arguments. */
function documentedInstalls(): { command: string; args: string[] }[] {
  const readme = readFileSync(`${root}deploy/README.md`, 'utf8');
  const start = readme.indexOf('## Kubernetes (Helm)');
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  const commands: { command: string; args: string[] }[] = [];
  for (const block of section.matchAll(/```sh\n([\s\S]*?)```/g)) {
    for (const line of block[1]!.replace(/\\\n\s*/g, ' ').split('\n')) {
      if (!line.startsWith('helm install ')) continue;
      const words = shellWords(line);
      commands.push({ command: line, args: words.slice(2) });
    }
  }
  return commands;
}

function parseManifests(text: string): Manifest[] {
  const manifests: Manifest[] = [];
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) throw new Error(`rendered YAML does not parse: ${document.errors.map(String).join('; ')}`);
    const value = document.toJS() as Manifest | null;
    if (value !== null) manifests.push(value);
  }
  return manifests;
}

// --- Kubernetes schema validation -----------------------------------------------------------------

const MODELS: Record<string, { prototype: { validate(): void } }> = {
  'v1/ConfigMap': coreV1.ConfigMap,
  'v1/Pod': coreV1.Pod,
  'v1/Secret': coreV1.Secret,
  'v1/Service': coreV1.Service,
  'v1/ServiceAccount': coreV1.ServiceAccount,
  'apps/v1/Deployment': appsV1.Deployment,
  'apps/v1/StatefulSet': appsV1.StatefulSet,
  'autoscaling/v2/HorizontalPodAutoscaler': autoscalingV2.HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': policyV1.PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': networkingV1.NetworkPolicy,
  'networking.k8s.io/v1/Ingress': networkingV1.Ingress,
  'batch/v1/Job': batchV1.Job,
};

/**
 * Schema problems of one document. The validators kubernetes-models generates from the Kubernetes
 * OpenAPI check types, formats, enums and required fields but let unknown fields pass (which the API
 * server drops or refuses). Each validator reads every field its schema declares, so the validated
 * document is watched through a Proxy: a field nothing read is a field Kubernetes does not have.
 */
function schemaProblems(manifest: Manifest): string[] {
  const model = MODELS[`${manifest.apiVersion}/${manifest.kind}`];
  if (!model) return [`no schema for ${manifest.apiVersion} ${manifest.kind} in the test's table`];
  const read = new Set<string>();
  const watch = (value: unknown, path: string): unknown => {
    if (value === null || typeof value !== 'object') return value;
    return new Proxy(value, {
      get(target, key) {
        const field = (target as Record<string | symbol, unknown>)[key];
        if (typeof key !== 'string') return field;
        read.add(`${path}/${key}`);
        return watch(field, `${path}/${key}`);
      },
    });
  };
  const problems: string[] = [];
  try {
    model.prototype.validate.call(watch(manifest, ''));
  } catch (error) {
    problems.push((error as Error).message);
  }
  const visit = (value: unknown, path: string) => {
    if (value === null || typeof value !== 'object') return;
    for (const [key, child] of Object.entries(value)) {
      const childPath = `${path}/${key}`;
      if (!read.has(childPath)) problems.push(`unknown field ${childPath}`);
      else visit(child, childPath);
    }
  };
  visit(manifest, '');
  return problems;
}

// --- structure helpers ----------------------------------------------------------------------------

const componentOf = (labels: Record<string, string> | undefined) => labels?.['app.kubernetes.io/component'];
const selects = (selector: Record<string, string> | undefined, labels: Record<string, string>) =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([key, value]) => labels[key] === value);

function workloadOf(manifests: Manifest[], component: string): Manifest {
  const found = manifests.filter(
    (manifest) => ['Deployment', 'StatefulSet', 'Job'].includes(manifest.kind) && componentOf(manifest.spec.template.metadata.labels) === component,
  );
  expect(found, `one workload for ${component}`).toHaveLength(1);
  return found[0]!;
}

function containerOf(workload: Manifest, name: string): any {
  const container = workload.spec.template.spec.containers.find((candidate: any) => candidate.name === name);
  expect(container, `container ${name} in ${workload.metadata.name}`).toBeDefined();
  return container;
}

const envValue = (container: any, name: string): string | undefined => container.env?.find((entry: any) => entry.name === name)?.value;

/** Each rule as "peer:port/protocol" strings: peer is a component (podSelector), cidr:… (ipBlock), or * (no peers). */
function describeRules(rules: any[] | undefined, peersField: 'from' | 'to'): string[] {
  const described: string[] = [];
  for (const rule of rules ?? []) {
    const peers: string[] = rule[peersField]?.length
      ? rule[peersField].map((peer: any) =>
          peer.podSelector && !peer.namespaceSelector ? componentOf(peer.podSelector.matchLabels) : peer.ipBlock ? `cidr:${peer.ipBlock.cidr}` : JSON.stringify(peer),
        )
      : ['*'];
    const ports: string[] = rule.ports?.length ? rule.ports.map((port: any) => `${port.port}/${port.protocol ?? 'TCP'}`) : ['*'];
    for (const peer of peers) for (const port of ports) described.push(`${peer}:${port}`);
  }
  return described.sort();
}

/** The files a pod sees in a ConfigMap volume: item path → content (every key when no items). */
function configMapVolumeFiles(manifests: Manifest[], volume: any): Map<string, string> {
  const configMap = manifests.find((manifest) => manifest.kind === 'ConfigMap' && manifest.metadata.name === volume.configMap.name);
  expect(configMap, `ConfigMap ${volume.configMap.name}`).toBeDefined();
  const items: { key: string; path: string }[] = volume.configMap.items ?? Object.keys(configMap!.data).map((key) => ({ key, path: key }));
  const files = new Map<string, string>();
  for (const item of items) {
    expect(configMap!.data[item.key], `ConfigMap key ${item.key}`).toBeTypeOf('string');
    files.set(item.path, configMap!.data[item.key]);
  }
  return files;
}

/** What the catalog container finds at the directory of GATEWAY_CONFIG: relative path → content. */
function catalogMount(manifests: Manifest[], workload: Manifest, containerName: string, configPath: string) {
  const container = containerOf(workload, containerName);
  const mount = container.volumeMounts.find((candidate: any) => candidate.mountPath === posix.dirname(configPath));
  expect(mount, `${containerName} mounts ${posix.dirname(configPath)}`).toBeDefined();
  const volume = workload.spec.template.spec.volumes.find((candidate: any) => candidate.name === mount.name);
  expect(volume?.configMap, `${containerName}'s ${mount.name} volume is a ConfigMap`).toBeDefined();
  return { directory: mount.mountPath as string, files: configMapVolumeFiles(manifests, volume) };
}

const METRICS_PORT = 9464;

const EXPECTED_INGRESS: Record<Service | 'gatewayctl', Service[] | '*' | []> = {
  edge: '*',
  auth: ['edge'],
  catalog: ['edge', 'routing'],
  ledger: ['edge'],
  routing: ['edge'],
  media: ['edge'],
  gatewayctl: [],
};

/** Asserts the chart's rules on one rendered release; returns the catalog's mounted files for later use. */
function checkRelease(manifests: Manifest[], label: string) {
  for (const manifest of manifests) expect(schemaProblems(manifest), `${label}: ${manifest.kind} ${manifest.metadata.name}`).toEqual([]);
  const names = manifests.map((manifest) => `${manifest.kind}/${manifest.metadata.name}`);
  expect(new Set(names).size, `${label}: no two objects of one kind share a name`).toBe(names.length);

  const job = manifests.find((manifest) => manifest.kind === 'Job');
  const ports = Object.fromEntries(
    SERVICES.map((service) => [service, containerOf(workloadOf(manifests, service), service).ports[0].containerPort as number]),
  ) as Record<Service, number>;

  for (const service of SERVICES) {
    const context = `${label}: ${service}`;
    const workload = workloadOf(manifests, service);
    expect(workload.kind, context).toBe(service === 'routing' ? 'StatefulSet' : 'Deployment');
    const podLabels: Record<string, string> = workload.spec.template.metadata.labels;
    const pod = workload.spec.template.spec;
    expect(selects(workload.spec.selector.matchLabels, podLabels), context).toBe(true);
    const container = containerOf(workload, service);
    expect(container.command.at(-1), context).toBe(`apps/${service}/dist/main.js`);

    const services = manifests.filter((manifest) => manifest.kind === 'Service' && manifest.spec.clusterIP !== 'None' && selects(manifest.spec.selector, podLabels));
    expect(services, `${context}: one ClusterIP Service`).toHaveLength(1);
    expect(container.ports.map((port: any) => port.name), context).toContain(services[0]!.spec.ports[0].targetPort);

    const hpa = manifests.find((manifest) => manifest.kind === 'HorizontalPodAutoscaler' && manifest.spec.scaleTargetRef.name === workload.metadata.name);
    expect(hpa?.spec.scaleTargetRef.kind, `${context}: HPA`).toBe(workload.kind);
    expect(hpa!.spec.minReplicas, context).toBeLessThanOrEqual(hpa!.spec.maxReplicas);
    expect(workload.spec.replicas, `${context}: the HPA owns replicas`).toBeUndefined();
    expect(container.resources.requests.cpu, `${context}: the HPA needs a CPU request`).toBeDefined();
    const pdbs = manifests.filter((manifest) => manifest.kind === 'PodDisruptionBudget' && selects(manifest.spec.selector.matchLabels, podLabels));
    expect(pdbs, `${context}: one PDB`).toHaveLength(1);

    const account = manifests.find((manifest) => manifest.kind === 'ServiceAccount' && manifest.metadata.name === pod.serviceAccountName);
    expect(account?.automountServiceAccountToken, `${context}: own ServiceAccount without a token`).toBe(false);
    expect(pod.automountServiceAccountToken, context).toBe(false);
    expect(manifests.filter((manifest) => manifest.kind === 'ServiceAccount' && manifest.metadata.name === pod.serviceAccountName && componentOf(manifest.metadata.labels) === service), context).toHaveLength(1);

    expect(pod.topologySpreadConstraints.map((constraint: any) => constraint.topologyKey), context).toEqual(['topology.kubernetes.io/zone', 'kubernetes.io/hostname']);
    for (const constraint of pod.topologySpreadConstraints) expect(selects(constraint.labelSelector.matchLabels, podLabels), context).toBe(true);

    expect(pod.securityContext.runAsNonRoot, context).toBe(true);
    for (const each of [...(pod.initContainers ?? []), ...pod.containers]) {
      expect(each.securityContext, `${context}: ${each.name}`).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    }
    // Metrics: the container port the scraper reads (METRICS_PORT), announced by the pod annotations.
    expect(container.ports.find((port: any) => port.name === 'metrics')?.containerPort, context).toBe(METRICS_PORT);
    expect(envValue(container, 'METRICS_PORT'), context).toBe(String(METRICS_PORT));
    expect(workload.spec.template.metadata.annotations, context).toMatchObject({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(METRICS_PORT) });
    // Internal credentials from a Secret, never a value; the admin token only where admin RPCs live.
    const secretEnv = (name: string) => container.env.find((entry: any) => entry.name === name)?.valueFrom?.secretKeyRef;
    expect(secretEnv('GATEWAY_INTERNAL_TOKEN')?.name, `${context}: service token from a Secret`).toBeTruthy();
    expect(secretEnv('GATEWAY_ADMIN_TOKEN') !== undefined, `${context}: admin token only on auth, ledger, catalog`).toBe(['auth', 'ledger', 'catalog'].includes(service));
    expect(container.env.some((entry: any) => entry.name === 'GATEWAY_INTERNAL_AUTH'), context).toBe(false);
    const tmp = container.volumeMounts.find((mount: any) => mount.mountPath === '/tmp');
    expect(pod.volumes.find((volume: any) => volume.name === tmp?.name)?.emptyDir, `${context}: /tmp is an emptyDir`).toBeDefined();
  }

  // NetworkPolicy: exactly the allowed sources and destinations, and nothing else.
  const policies = manifests.filter((manifest) => manifest.kind === 'NetworkPolicy');
  const components = job ? [...SERVICES, 'gatewayctl' as const] : [...SERVICES];
  expect(policies.map((policy) => componentOf(policy.spec.podSelector.matchLabels)).sort(), label).toEqual([...components].sort());
  const callee = (service: Service) => `${service}:${ports[service]}/TCP`;
  const common = ['*:53/TCP', '*:53/UDP', '*:4222/TCP'];
  const internet = ['cidr:0.0.0.0/0:*', 'cidr:::/0:*'];
  const expectedEgress: Record<string, string[]> = {
    edge: [...common, callee('auth'), callee('catalog'), callee('ledger'), callee('routing'), callee('media')],
    auth: [...common, '*:5432/TCP'],
    catalog: [...common, '*:5432/TCP'],
    ledger: [...common, '*:5432/TCP'],
    routing: [...common, callee('catalog'), ...internet],
    media: [...common, '*:5432/TCP', ...internet],
    gatewayctl: ['*:53/TCP', '*:53/UDP', callee('auth'), callee('catalog'), callee('ledger')],
  };
  for (const component of components) {
    const policy = policies.find((candidate) => componentOf(candidate.spec.podSelector.matchLabels) === component)!;
    const context = `${label}: NetworkPolicy of ${component}`;
    expect([...policy.spec.policyTypes].sort(), context).toEqual(['Egress', 'Ingress']);
    const sources = EXPECTED_INGRESS[component];
    const expectedIngress =
      sources === '*'
        ? [`*:${ports.edge}/TCP`]
        : sources.length === 0
          ? []
          : [...sources, ...(job && ['auth', 'catalog', 'ledger'].includes(component) ? ['gatewayctl'] : [])].map((source) => `${source}:${ports[component as Service]}/TCP`);
    // Every service's metrics port admits the scraper (the default: Prometheus pods in any namespace), nothing else.
    const scraper = `${JSON.stringify({ namespaceSelector: {}, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } } })}:${METRICS_PORT}/TCP`;
    expect(describeRules(policy.spec.ingress, 'from'), context).toEqual([...expectedIngress, ...(component === 'gatewayctl' ? [] : [scraper])].sort());
    expect(describeRules(policy.spec.egress, 'to'), context).toEqual(expectedEgress[component]!.sort());
    for (const rule of policy.spec.egress) {
      for (const peer of rule.to ?? []) {
        if (peer.ipBlock) expect(peer.ipBlock.except, `${context}: the internet excludes private and metadata ranges`).toEqual(expect.arrayContaining(peer.ipBlock.cidr === '0.0.0.0/0' ? ['10.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16'] : ['fc00::/7']));
      }
    }
  }

  // Routing: outbox on a per-pod claim, the headless Service, and the edge dialling through it.
  const routing = workloadOf(manifests, 'routing');
  const routingContainer = containerOf(routing, 'routing');
  const outboxDirectory = envValue(routingContainer, 'USAGE_OUTBOX_DIR')!;
  const outboxMount = routingContainer.volumeMounts.find((mount: any) => outboxDirectory.startsWith(`${mount.mountPath}/`));
  expect(outboxMount, `${label}: USAGE_OUTBOX_DIR ${outboxDirectory} is on a mounted volume`).toBeDefined();
  const claimNames = (routing.spec.volumeClaimTemplates ?? []).map((claim: any) => claim.metadata.name);
  expect(claimNames, `${label}: the outbox volume is a per-pod PersistentVolumeClaim`).toContain(outboxMount.name);
  expect(routing.spec.template.spec.volumes.map((volume: any) => volume.name), label).not.toContain(outboxMount.name);
  expect(routing.spec.persistentVolumeClaimRetentionPolicy, label).toEqual({ whenScaled: 'Retain', whenDeleted: 'Retain' });
  const headless = manifests.find((manifest) => manifest.kind === 'Service' && manifest.spec.clusterIP === 'None');
  expect(headless?.metadata.name, label).toMatch(/-routing-headless$/);
  expect(selects(headless!.spec.selector, routing.spec.template.metadata.labels), label).toBe(true);
  expect(routing.spec.serviceName, label).toBe(headless!.metadata.name);
  // The edge balances over every routing pod: it resolves the headless Service (edge.routerHeadless, the default).
  expect(envValue(containerOf(workloadOf(manifests, 'edge'), 'edge'), 'ROUTER_ADDR'), label).toBe(`dns:///${headless!.metadata.name}:${ports.routing}`);

  // Catalog: the config and every file it names by a relative path reach the pod.
  const catalog = workloadOf(manifests, 'catalog');
  const configPath = envValue(containerOf(catalog, 'catalog'), 'GATEWAY_CONFIG')!;
  const mounted = catalogMount(manifests, catalog, 'catalog', configPath);
  const config = parse(mounted.files.get(posix.basename(configPath)) ?? '') as { startups?: { icon_svg?: string }[] };
  expect(config, `${label}: ${configPath} is in the catalog's volume`).toBeTruthy();
  for (const startup of config.startups ?? []) {
    if (startup.icon_svg && !startup.icon_svg.includes('<svg') && !posix.isAbsolute(startup.icon_svg)) {
      expect([...mounted.files.keys()], `${label}: icon ${startup.icon_svg}`).toContain(posix.normalize(startup.icon_svg));
    }
  }
  if (job) {
    const jobMount = catalogMount(manifests, job, 'gatewayctl', configPath);
    expect(jobMount.files, `${label}: the gatewayctl Job sees the catalog's files`).toEqual(mounted.files);
    const jobEnv: string[] = job.spec.template.spec.containers[0].env.filter((entry: any) => entry.valueFrom?.secretKeyRef).map((entry: any) => entry.name);
    expect(jobEnv, `${label}: gatewayctl holds the admin credential, not the service one`).toEqual(['GATEWAY_ADMIN_TOKEN']);
  }

  const ingress = manifests.find((manifest) => manifest.kind === 'Ingress');
  if (ingress) {
    const edgeService = manifests.find((manifest) => manifest.kind === 'Service' && componentOf(manifest.metadata.labels) === 'edge')!;
    for (const rule of ingress.spec.rules) {
      for (const path of rule.http.paths) {
        expect(path.backend.service, `${label}: Ingress backend`).toEqual({ name: edgeService.metadata.name, port: { number: edgeService.spec.ports[0].port } });
      }
    }
  }
  return { catalogDirectory: mounted.directory, catalogFiles: mounted.files, configPath, catalogContainer: containerOf(catalog, 'catalog') };
}

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

describe('runtime flags', () => {
  const commandFlags = (parts: readonly string[], app: string) => {
    expect(parts[0]).toBe('node');
    expect(parts.at(-1)).toBe(`apps/${app}/dist/main.js`);
    return parts.slice(1, -1);
  };

  it('the bench starts services with the node flags the image, compose and the chart run them with', async () => {
    const { SERVICE_NODE_FLAGS, SERVICES, serviceNodeFlags } = await import('../src/bench/gateway-cluster.js');
    const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
    const nodeOptions = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(dockerfile)?.[1]?.split(' ') ?? [];
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)?.[1] ?? '[]') as string[];
    // The image's CMD runs main.js, a link to the app its APP build arg names (edge by default).
    expect(/^ARG APP=(\S+)$/m.exec(dockerfile)?.[1]).toBe('edge');
    expect(dockerfile).toContain('ln -s "apps/${APP}/dist/main.js" main.js');
    const cliFlags = commandFlags([...cmd.slice(0, -1), cmd.at(-1) === 'main.js' ? 'apps/edge/dist/main.js' : String(cmd.at(-1))], 'edge');
    expect([...nodeOptions, ...cliFlags]).toEqual([...SERVICE_NODE_FLAGS]);
    // They are on the command line because node refuses them in NODE_OPTIONS (moved there, a service
    // would not start); should a node release accept one, this fails and the flag can move.
    for (const flag of cliFlags) {
      const probe = spawnSync(process.execPath, ['-e', '0'], { env: { ...process.env, NODE_OPTIONS: flag }, encoding: 'utf8' });
      expect(probe.stderr, flag).toMatch(/not allowed in NODE_OPTIONS/);
    }

    // Each service: the image's NODE_OPTIONS, the common command-line flags, then its own (a later flag wins).
    const compose = parse(readFileSync(`${root}deploy/docker-compose.yaml`, 'utf8')) as { services: Record<string, { command?: string[] }> };
    const values = parse(readFileSync(`${root}helm/gateway/values.yaml`, 'utf8')) as Record<string, { nodeFlags?: string[] }> & { nodeFlags?: string[] };
    expect(values.nodeFlags).toEqual(cliFlags);
    for (const app of SERVICES) {
      expect([...nodeOptions, ...commandFlags(compose.services[app]?.command ?? [], app)], `compose ${app}`).toEqual([...serviceNodeFlags(app)]);
      expect([...nodeOptions, ...cliFlags, ...(values[app]?.nodeFlags ?? [])], `chart values ${app}`).toEqual([...serviceNodeFlags(app)]);
      const template = readFileSync(`${root}helm/gateway/templates/${app}.yaml`, 'utf8');
      expect(template, `chart ${app}`).toContain(
        `command: ["node",{{ range .Values.nodeFlags }} {{ . | quote }},{{ end }}{{ range .Values.${app}.nodeFlags }} {{ . | quote }},{{ end }} "apps/${app}/dist/main.js"]`,
      );
    }
    // Every service but the edge runs with the small young generation; the edge with its own flags.
    expect(serviceNodeFlags('edge')).toEqual([...SERVICE_NODE_FLAGS, '--max-semi-space-size=16', '--heap-growing-percent=50']);
    expect(SERVICES.filter((app) => serviceNodeFlags(app).at(-1) === '--max-semi-space-size=8')).toEqual(SERVICES.filter((app) => app !== 'edge'));
  });

  it('node starts with the flags of every service and of `npm start` (a flag it does not know would stop the process)', async () => {
    const { SERVICES, serviceNodeFlags } = await import('../src/bench/gateway-cluster.js');
    const { NPM_START_NODE_FLAGS } = await import('../src/bench/peers.js');
    for (const [app, flags] of [...SERVICES.map((app) => [app, serviceNodeFlags(app)] as const), ['npm start', NPM_START_NODE_FLAGS] as const]) {
      const run = spawnSync(process.execPath, [...flags, '-e', 'process.stdout.write("up")'], { encoding: 'utf8' });
      expect({ app, status: run.status, stdout: run.stdout, stderr: run.stderr }).toEqual({ app, status: 0, stdout: 'up', stderr: '' });
    }
  });

  it('the bench runs `npm start` with the node flags of package.json\'s start script', async () => {
    const { NPM_START_NODE_FLAGS } = await import('../src/bench/peers.js');
    const script = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: { start: string } }).scripts.start;
    // Through scripts/node-major.sh, which runs the command on package.json's Node major.
    expect(script.startsWith('sh scripts/node-major.sh ')).toBe(true);
    const start = script.slice('sh scripts/node-major.sh '.length).split(' ');
    expect(start[0]).toBe('node');
    expect(start.at(-1)).toBe('libs/stack/dist/main.js');
    expect(start.slice(1, -1)).toEqual([...NPM_START_NODE_FLAGS]);
  });

  it('a later --max-semi-space-size on the command line wins over the one in NODE_OPTIONS', () => {
    // The chart relies on it: the image sets 32 MiB in NODE_OPTIONS, the services but the edge 8 on the command line.
    const probe = (args: string[]) => {
      // Allocates enough that survives a scavenge for V8 to grow the young generation to what it may.
      // (stdout.write, not console.log: with FORCE_COLOR set, as under nx, console.log colours numbers.)
      const script = "const v8=require('v8');let keep=[];let max=0;for(let i=0;i<3e6;i++){keep.push({a:i,b:'x'+i});if(keep.length>2000)keep=[];if(i%10000===0)max=Math.max(max,v8.getHeapSpaceStatistics().find((s)=>s.space_name==='new_space').space_size)}process.stdout.write(String(max))";
      const run = spawnSync(process.execPath, [...args, '-e', script], { env: { ...process.env, NODE_OPTIONS: '--max-semi-space-size=32' }, encoding: 'utf8' });
      return Number(run.stdout.trim()) / 1024 / 1024;
    };
    const small = probe(['--max-semi-space-size=8']);
    expect(small).toBeGreaterThan(0);
    expect(small).toBeLessThanOrEqual(16);
    expect(probe([])).toBeGreaterThan(16);
  });
});

// Whether some release of Node `major` (its latest, as a node:<major> image pulls) satisfies an npm
// engines range; covers the comparator forms the lockfile holds (>=, >, <, <=, ^, ~, bare, x and *).
function acceptsNodeMajor(range: string, major: number): boolean {
  const version = [major, 999, 999];
  const parse = (text: string) => text.split('.').map((part) => (/^\d+$/.test(part) ? Number(part) : undefined));
  const compare = (bound: (number | undefined)[]) => {
    for (let index = 0; index < 3; index++) {
      const part = bound[index];
      if (part === undefined) return 0;
      if (version[index] !== part) return version[index]! - part;
    }
    return 0;
  };
  return range.split('||').some((clause) =>
    clause
      .trim()
      .replace(/([<>=^~]+)\s+/g, '$1')
      .split(/\s+/)
      .filter(Boolean)
      .every((comparator) => {
        const [, operator = '', text = ''] = /^([<>=^~]*)v?(.*)$/.exec(comparator)!;
        const bound = parse(text);
        if (operator === '>=') return compare(bound) >= 0;
        if (operator === '>') return compare(bound) > 0;
        if (operator === '<=') return compare(bound) <= 0;
        if (operator === '<') return compare(bound) < 0;
        if (operator === '^' || operator === '~' || operator === '' || operator === '=') return bound[0] === undefined || bound[0] === major;
        throw new Error(`unknown engines comparator ${comparator}`);
      }),
  );
}

describe('image build', () => {
  const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
  const runs = [...dockerfile.matchAll(/^RUN ((?:.*\\\n)*.*)$/gm)].map((match) => match[1]!.replace(/\\\n\s*/g, ' '));

  it('installs with `npm ci` and builds with `npm run build`, as .ci/run and deploy/README.md do', () => {
    const ci = readFileSync(`${root}.ci/run`, 'utf8');
    const ciInstall = /^npm (ci|install)\b.*$/m.exec(ci)?.[0];
    expect(ciInstall).toMatch(/^npm ci\b/);
    const installs = runs.flatMap((run) => [...run.matchAll(/\bnpm (ci|install|i)\b/g)].map((match) => match[0]));
    expect(installs.length).toBeGreaterThanOrEqual(2);
    expect(new Set(installs)).toEqual(new Set(['npm ci']));
    expect(runs.some((run) => /\bnpm run build\b/.test(run))).toBe(true);
    expect(readFileSync(`${root}deploy/README.md`, 'utf8')).toContain('npm ci && npm run build');
    // The README's two set-up commands install the same way.
    const setup = readFileSync(`${root}README.md`, 'utf8').split('## Set-up')[1]!.split('```')[1]!;
    const setupCommands = setup.split('\n').filter((line) => line.startsWith('npm '));
    expect(setupCommands).toHaveLength(2);
    for (const command of setupCommands) expect(command).toMatch(/^npm ci && npm (start|test)\b/);
  });

  it('runs on a Node major that package.json and every installed dependency accept', () => {
    const image = /^ARG NODE_IMAGE=node:(\d+)[-\w.]*$/m.exec(dockerfile);
    expect(image).not.toBeNull();
    const major = Number(image![1]);
    expect(dockerfile.match(/^FROM (\S+)/gm)?.every((line) => line.startsWith('FROM ${NODE_IMAGE}'))).toBe(true);
    const manifest = JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { engines: { node: string } };
    expect(acceptsNodeMajor(manifest.engines.node, major), manifest.engines.node).toBe(true);
    const lock = JSON.parse(readFileSync(`${root}package-lock.json`, 'utf8')) as {
      packages: Record<string, { engines?: { node?: string } | string[]; optional?: boolean }>;
    };
    const refusing = Object.entries(lock.packages)
      .filter(([, entry]) => !entry.optional && !Array.isArray(entry.engines) && entry.engines?.node)
      .filter(([, entry]) => !acceptsNodeMajor((entry.engines as { node: string }).node, major))
      .map(([path, entry]) => `${path} ${(entry.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
    // The range check itself tells lines apart (Node 20 is refused by @nats-io/nuid's ">= 22.x").
    expect(acceptsNodeMajor('>= 22.x', 20)).toBe(false);
    expect(acceptsNodeMajor('^20.0.0 || ^22.0.0 || >=24.0.0', 23)).toBe(false);
    expect(acceptsNodeMajor('^20.19.0 || >=22.12.0', 22)).toBe(true);
  });

  it('can make every app the default process, and runs it as a user other than root', () => {
    const apps = readdirSync(`${root}apps`, { withFileTypes: true }).filter((entry) => entry.isDirectory()).map((entry) => entry.name);
    expect(apps.length).toBeGreaterThan(5);
    expect(dockerfile).toMatch(/^ARG APP=\w+$/m);
    // The build copies every app's dist into the image, so each APP value finds its main.js.
    expect(runs.some((run) => run.includes('for project in apps/*'))).toBe(true);
    for (const app of apps) expect(JSON.parse(readFileSync(`${root}apps/${app}/package.json`, 'utf8')).scripts?.build, app).toBeTruthy();
    const users = [...dockerfile.matchAll(/^USER (\S+)$/gm)].map((match) => match[1]);
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
    // USER comes after the last RUN of the runtime stage and before its CMD.
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(runtime.lastIndexOf('\nUSER ')).toBeGreaterThan(runtime.lastIndexOf('\nRUN '));
  });
});
