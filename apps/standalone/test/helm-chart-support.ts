import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';
import * as monitoringV1 from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { parser as promqlParser } from '@prometheus-io/lezer-promql';
import * as appsV1 from 'kubernetes-models/apps/v1';
import * as autoscalingV2 from 'kubernetes-models/autoscaling/v2';
import * as batchV1 from 'kubernetes-models/batch/v1';
import * as networkingV1 from 'kubernetes-models/networking.k8s.io/v1';
import * as policyV1 from 'kubernetes-models/policy/v1';
import * as coreV1 from 'kubernetes-models/v1';
import { expect } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';

// The chart rendered by a real Go template engine — helm when it is on PATH, otherwise chart-render
// (helm/gateway/ci/renderer: text/template + sprig + sigs.k8s.io/yaml + gojsonschema from Debian, the
// libraries helm is made of) — for the default values and for every `helm install` command of
// deploy/README.md's Helm section, exactly as written there. Every document is checked against the
// Kubernetes API schemas (kubernetes-models), unknown fields included, and against the chart's rules.
export const root = fileURLToPath(new URL('../../../', import.meta.url));
export const SERVICES = ['edge', 'auth', 'catalog', 'ledger', 'routing', 'media', 'jobs'] as const;
export type Service = (typeof SERVICES)[number];

// Rendered manifests are untyped JSON; the checks below read them as such.
export type Manifest = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> }; [field: string]: any };

export interface Renderer {
  describe: string;
  render(args: readonly string[]): { status: number | null; stdout: string; stderr: string };
}

export function locateRenderer(): Renderer {
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
export const SUBSTITUTIONS: Record<string, string> = {
  '$(openssl rand -hex 32)': 'c0ffee'.repeat(10) + 'c0de',
  '$(openssl rand -base64 32)': Buffer.alloc(32, 0xc0).toString('base64'),
};

/** Splits one shell command line into words: '…', "…", backslash escapes, known $(…) stand-ins. */
export function shellWords(line: string): string[] {
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
export function documentedInstalls(): { command: string; args: string[] }[] {
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

export function parseManifests(text: string): Manifest[] {
  const manifests: Manifest[] = [];
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) throw new Error(`rendered YAML does not parse: ${document.errors.map(String).join('; ')}`);
    const value = document.toJS() as Manifest | null;
    if (value !== null) manifests.push(value);
  }
  return manifests;
}

// --- Kubernetes schema validation -----------------------------------------------------------------

export const MODELS: Record<string, { prototype: { validate(): void } }> = {
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
  // Custom resources, validated against the OpenAPI schemas of their CRDs (KEDA's and the Prometheus
  // Operator's, generated into @kubernetes-models/keda and @kubernetes-models/prometheus-operator).
  'keda.sh/v1alpha1/ScaledObject': keda.ScaledObject,
  'monitoring.coreos.com/v1/ServiceMonitor': monitoringV1.ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': monitoringV1.PrometheusRule,
};

/**
 * Schema problems of one document. The validators kubernetes-models generates from the Kubernetes
 * OpenAPI check types, formats, enums and required fields but let unknown fields pass (which the API
 * server drops or refuses). Each validator reads every field its schema declares, so the validated
 * document is watched through a Proxy: a field nothing read is a field Kubernetes does not have.
 */
export function schemaProblems(manifest: Manifest): string[] {
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

export const componentOf = (labels: Record<string, string> | undefined) => labels?.['app.kubernetes.io/component'];
export const selects = (selector: Record<string, string> | undefined, labels: Record<string, string>) =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([key, value]) => labels[key] === value);

export function workloadOf(manifests: Manifest[], component: string): Manifest {
  const found = manifests.filter(
    (manifest) => ['Deployment', 'StatefulSet', 'Job'].includes(manifest.kind) && componentOf(manifest.spec.template.metadata.labels) === component,
  );
  expect(found, `one workload for ${component}`).toHaveLength(1);
  return found[0]!;
}

export function containerOf(workload: Manifest, name: string): any {
  const container = workload.spec.template.spec.containers.find((candidate: any) => candidate.name === name);
  expect(container, `container ${name} in ${workload.metadata.name}`).toBeDefined();
  return container;
}

export const envValue = (container: any, name: string): string | undefined => container.env?.find((entry: any) => entry.name === name)?.value;

/** Each rule as "peer:port/protocol" strings: peer is a component (podSelector), cidr:… (ipBlock), or * (no peers). */
export function describeRules(rules: any[] | undefined, peersField: 'from' | 'to'): string[] {
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
export function configMapVolumeFiles(manifests: Manifest[], volume: any): Map<string, string> {
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
export function catalogMount(manifests: Manifest[], workload: Manifest, containerName: string, configPath: string) {
  const container = containerOf(workload, containerName);
  const mount = container.volumeMounts.find((candidate: any) => candidate.mountPath === posix.dirname(configPath));
  expect(mount, `${containerName} mounts ${posix.dirname(configPath)}`).toBeDefined();
  const volume = workload.spec.template.spec.volumes.find((candidate: any) => candidate.name === mount.name);
  expect(volume?.configMap, `${containerName}'s ${mount.name} volume is a ConfigMap`).toBeDefined();
  return { directory: mount.mountPath as string, files: configMapVolumeFiles(manifests, volume) };
}

export const METRICS_PORT = 9464;

export const EXPECTED_INGRESS: Record<Service | 'gatewayctl', Service[] | '*' | []> = {
  edge: '*',
  auth: ['edge', 'jobs'],
  catalog: ['edge', 'routing', 'jobs'],
  ledger: ['edge', 'jobs'],
  routing: ['edge', 'jobs'],
  media: ['edge'],
  jobs: ['edge'],
  gatewayctl: [],
};

/** Asserts the chart's rules on one rendered release; returns the catalog's mounted files for later use. */
export function checkRelease(manifests: Manifest[], label: string) {
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

    // One autoscaler: the chart's HPA, or KEDA's ScaledObject (loadScaling.mode=keda), which makes its own.
    const targets = (kind: string) => manifests.filter((manifest) => manifest.kind === kind && manifest.spec.scaleTargetRef.name === workload.metadata.name);
    const [hpa] = targets('HorizontalPodAutoscaler');
    const [scaledObject] = targets('ScaledObject');
    expect(targets('HorizontalPodAutoscaler').length + targets('ScaledObject').length, `${context}: one HPA or ScaledObject`).toBe(1);
    if (hpa) {
      expect(hpa.spec.scaleTargetRef.kind, `${context}: HPA`).toBe(workload.kind);
      expect(hpa.spec.minReplicas, context).toBeLessThanOrEqual(hpa.spec.maxReplicas);
    } else {
      expect(scaledObject!.spec.scaleTargetRef, `${context}: ScaledObject`).toEqual({ apiVersion: 'apps/v1', kind: workload.kind, name: workload.metadata.name });
      expect(scaledObject!.spec.minReplicaCount, context).toBeLessThanOrEqual(scaledObject!.spec.maxReplicaCount);
    }
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
    // A ServiceMonitor (when rendered) reaches exactly this service's metrics port through a headless
    // Service of that port alone, and labels the series with the release and the component.
    const monitors = manifests.filter((manifest) => manifest.kind === 'ServiceMonitor');
    if (monitors.length > 0) {
      const scraping = monitors.filter((monitor) => manifests.some((manifest) => manifest.kind === 'Service' && selects(monitor.spec.selector.matchLabels, manifest.metadata.labels ?? {}) && selects(manifest.spec.selector, podLabels)));
      expect(scraping, `${context}: one ServiceMonitor`).toHaveLength(1);
      const monitor = scraping[0]!;
      const scraped = manifests.filter((manifest) => manifest.kind === 'Service' && selects(monitor.spec.selector.matchLabels, manifest.metadata.labels ?? {}));
      expect(scraped, `${context}: the ServiceMonitor selects one Service`).toHaveLength(1);
      expect(scraped[0]!.spec, `${context}: metrics Service`).toMatchObject({ clusterIP: 'None', ports: [{ name: 'metrics', port: METRICS_PORT, targetPort: 'metrics' }] });
      expect(scraped[0]!.spec.ports, context).toHaveLength(1);
      expect(selects(scraped[0]!.spec.selector, podLabels), context).toBe(true);
      expect(monitor.spec.endpoints.map((endpoint: any) => [endpoint.port, endpoint.path]), context).toEqual([['metrics', '/metrics']]);
      expect(monitor.spec.endpoints[0].relabelings.map((rule: any) => [rule.sourceLabels[0], rule.targetLabel]), context).toEqual([
        ['__meta_kubernetes_pod_label_app_kubernetes_io_instance', 'release'],
        ['__meta_kubernetes_pod_label_app_kubernetes_io_component', 'component'],
      ]);
    }
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
    edge: [...common, callee('auth'), callee('catalog'), callee('ledger'), callee('routing'), callee('media'), callee('jobs')],
    auth: [...common, '*:5432/TCP'],
    catalog: [...common, '*:5432/TCP'],
    ledger: [...common, '*:5432/TCP', ...internet],
    routing: [...common, callee('catalog'), ...internet],
    media: [...common, '*:5432/TCP', ...internet],
    jobs: [...common, '*:5432/TCP', callee('auth'), callee('catalog'), callee('ledger'), callee('routing')],
    gatewayctl: ['*:53/TCP', '*:53/UDP', callee('auth'), callee('catalog'), callee('ledger'), callee('jobs')],
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
          : [...sources, ...(job && ['auth', 'catalog', 'ledger', 'jobs'].includes(component) ? ['gatewayctl'] : [])].map((source) => `${source}:${ports[component as Service]}/TCP`);
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
  const headless = manifests.find((manifest) => manifest.kind === 'Service' && manifest.spec.clusterIP === 'None' && manifest.metadata.name.endsWith('-routing-headless'));
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

// --- PromQL ------------------------------------------------------------------------------------------

/** Grafana's interval variables, replaced by a duration before parsing (other $variables sit inside label values). */
const GRAFANA_INTERVALS: [RegExp, string][] = [[/\$__rate_interval\b/g, '5m'], [/\$__interval\b/g, '1m'], [/\$__range\b/g, '1h']];

/**
 * Parses one PromQL expression with Prometheus' own grammar (@prometheus-io/lezer-promql) and returns
 * the metric names its selectors read, and its syntax errors (as text near each).
 */
export function promqlNames(expression: string): { names: string[]; errors: string[] } {
  let text = expression;
  for (const [pattern, duration] of GRAFANA_INTERVALS) text = text.replace(pattern, duration);
  const names: string[] = [];
  const errors: string[] = [];
  promqlParser.parse(text).iterate({
    enter(node) {
      if (node.type.isError) errors.push(`syntax error at ${node.from}: …${text.slice(Math.max(0, node.from - 20), node.from + 20)}…`);
      if (node.name === 'VectorSelector') {
        const identifier = node.node.getChild('Identifier');
        if (identifier) names.push(text.slice(identifier.from, identifier.to));
        // A selector by name matcher only ({__name__="x"}) is read as that name.
        for (const match of text.slice(node.from, node.to).matchAll(/__name__\s*=\s*"([^"]+)"/g)) names.push(match[1]!);
      }
    },
  });
  return { names, errors };
}

/** Every PromQL expression of a Grafana dashboard: panel targets (nested rows included) and query variables. */
export function dashboardExpressions(dashboard: any): { where: string; expr: string }[] {
  const found: { where: string; expr: string }[] = [];
  const visit = (panels: any[]) => {
    for (const panel of panels ?? []) {
      for (const target of panel.targets ?? []) if (typeof target.expr === 'string') found.push({ where: `panel "${panel.title}" ${target.refId}`, expr: target.expr });
      visit(panel.panels);
    }
  };
  visit(dashboard.panels);
  for (const variable of dashboard.templating?.list ?? []) {
    if (variable.type !== 'query') continue;
    const query = typeof variable.query === 'string' ? variable.query : variable.query?.query;
    // label_values(SELECTOR, label) reads SELECTOR's series.
    const selector = /^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$/.exec(query ?? '')?.[1];
    found.push({ where: `variable $${variable.name}`, expr: selector ?? query });
  }
  return found;
}

/** The names under which a prom-client registry's metrics appear to Prometheus (histogram and summary series included). */
export function exportedSeriesNames(metrics: { name: string; type: string }[]): Set<string> {
  const names = new Set<string>();
  for (const { name, type } of metrics) {
    names.add(name);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(name + suffix);
    if (type === 'summary') for (const suffix of ['_sum', '_count']) names.add(name + suffix);
  }
  return names;
}
