import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBus, createTestDatabase, eventually, natsUrl, type TestBus, type TestDatabase, testInternalAuthEnv } from '@gateway/testing';
import { freePort } from '../src/index.js';
import { root, type Service, type Manifest, type Renderer, locateRenderer, shellWords, documentedInstalls, parseManifests, schemaProblems, componentOf, selects, workloadOf, containerOf, envValue, describeRules, METRICS_PORT, checkRelease, promqlNames, dashboardExpressions, exportedSeriesNames } from './helm-chart-support.js';
import { startObservedStack } from './observability-harness.js';

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
    expect(kinds.filter((kind) => kind === 'HorizontalPodAutoscaler')).toHaveLength(7);
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

  it("the one-off gatewayctl pod of deploy/README.md is a valid Pod like the chart's gatewayctl Job, admitted to auth, catalog, ledger and jobs", () => {
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
    for (const component of ['auth', 'catalog', 'ledger', 'jobs']) {
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
      [['--set', 'devSecrets.enabled=true', '--set', 'devSecrets.webhookSecretKey=not-32-bytes'], /webhookSecretKey/],
      [['--set', 'ingress.enabled=true', '--set', 'ingress.hosts=null'], /hosts/],
      [['--set', 'networkPolicy.nats.port=0'], /nats\.port|nats\/port/],
      [['--set', 'topologySpread.whenUnsatisfiable=Sometimes'], /whenUnsatisfiable/],
      [['--set', 'loadScaling.mode=hpa'], /loadScaling\.mode|loadScaling\/mode/],
      [['--set', 'loadScaling.edge.activeStreams=0'], /activeStreams/],
      [['--set', 'monitoring.alerts.availabilitySLO=1'], /availabilitySLO/],
      [['--set', 'monitoring.serviceMonitor.interval=often'], /interval/],
      [['--set', 'monitoring.selector=namespace=gateway'], /selector/],
      [['--set', 'loadScaling.keda.serverAddress=prometheus:9090'], /serverAddress/],
      [['--set-string', 'catalogFiles./etc/passwd=x'], /catalogFiles/],
      // Templates: consistency a schema cannot express.
      [['--set', 'media.hpa.minReplicas=5', '--set', 'media.hpa.maxReplicas=2'], /media\.hpa: minReplicas 5 is above maxReplicas 2/],
      [['--set', 'loadScaling.mode=keda', '--set', 'edge.hpa.minReplicas=5', '--set', 'edge.hpa.maxReplicas=2'], /edge\.hpa: minReplicas 5 is above maxReplicas 2/],
      [['--set', 'monitoring.serviceMonitor.enabled=true', '--set', 'metrics.enabled=false'], /needs metrics\.enabled/],
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

  // Monitoring and load-based scaling (docs/operations.md "Kubernetes: scaling, alerts and dashboards").
  const MONITORING = [
    '--set', 'monitoring.serviceMonitor.enabled=true', '--set', 'monitoring.alerts.enabled=true', '--set', 'monitoring.dashboard.enabled=true',
  ];
  const dashboardFile = () => JSON.parse(readFileSync(`${root}helm/gateway/dashboards/gateway.json`, 'utf8'));
  const LOAD_GAUGES = {
    edge: ['gateway_http_requests_in_flight', 'gateway_http_streams_active'],
    routing: ['gateway_routing_requests_in_flight', 'gateway_routing_streams_active'],
  } as const;

  it('renders KEDA ScaledObjects, ServiceMonitors, the PrometheusRule and the dashboard, valid against their CRDs and the chart rules', () => {
    const manifests = renderOk(['gw', 'helm/gateway', '-n', 'gateway', '--set', 'loadScaling.mode=keda', ...MONITORING]);
    checkRelease(manifests, 'monitoring + keda');
    const ofKind = (kind: string) => manifests.filter((manifest) => manifest.kind === kind);
    // KEDA owns edge's and routing's HPA: the chart renders one only for the other five.
    expect(ofKind('HorizontalPodAutoscaler').map((hpa) => componentOf(hpa.metadata.labels)).sort()).toEqual(['auth', 'catalog', 'jobs', 'ledger', 'media']);
    expect(ofKind('ScaledObject').map((scaler) => componentOf(scaler.metadata.labels)).sort()).toEqual(['edge', 'routing']);
    for (const component of ['edge', 'routing'] as const) {
      const scaler = ofKind('ScaledObject').find((candidate) => componentOf(candidate.metadata.labels) === component)!;
      expect(scaler.spec).toMatchObject({ minReplicaCount: 2, maxReplicaCount: 10, pollingInterval: 15, cooldownPeriod: 300 });
      const [cpu, inFlight, streams] = scaler.spec.triggers;
      expect(cpu).toEqual({ type: 'cpu', metricType: 'Utilization', metadata: { value: '70' } });
      for (const [trigger, gauge, threshold] of [[inFlight, LOAD_GAUGES[component][0], '200'], [streams, LOAD_GAUGES[component][1], '150']] as const) {
        expect(trigger).toMatchObject({ type: 'prometheus', metricType: 'AverageValue', metadata: { serverAddress: 'http://prometheus-operated.monitoring.svc:9090', threshold } });
        // The whole deployment's load (KEDA's AverageValue divides it by the replicas), of this release and component only.
        expect(trigger.metadata.query).toBe(`sum(${gauge}{namespace="gateway",release="gw",component="${component}"})`);
        expect(promqlNames(trigger.metadata.query)).toEqual({ names: [gauge], errors: [] });
      }
    }
    expect(ofKind('ServiceMonitor')).toHaveLength(7);
    for (const monitor of ofKind('ServiceMonitor')) expect(monitor.spec.namespaceSelector).toEqual({ matchNames: ['gateway'] });

    const [rule] = ofKind('PrometheusRule');
    const alerts = rule!.spec.groups.flatMap((group: any) => group.rules).filter((entry: any) => entry.alert);
    expect(alerts.map((alert: any) => alert.alert)).toEqual(expect.arrayContaining([
      'GatewayErrorBudgetBurn', 'GatewayErrorBudgetBurnSlow', 'GatewaySettlementBacklog', 'GatewaySettlementStalled', 'GatewayProviderCircuitOpen', 'GatewayUsageOutboxGrowing',
    ]));
    for (const alert of alerts) {
      expect(['critical', 'warning'], alert.alert).toContain(alert.labels.severity);
      expect(alert.annotations.summary, alert.alert).toBeTruthy();
      expect(alert.annotations.description, alert.alert).toMatch(/docs\/operations\.md "Alerts"/);
    }
    // The page: the 1 h and 5 min windows at 14.4x the budget of 0.999, or 6 h and 30 min at 6x.
    const burn = alerts.find((alert: any) => alert.alert === 'GatewayErrorBudgetBurn').expr.replace(/\s+/g, ' ');
    for (const window of ['rate1h', 'rate5m']) expect(burn).toContain(`gateway:http_error_ratio:${window}{namespace="gateway",release="gw"} > (14.4 * (1 - 0.999))`);
    for (const window of ['rate6h', 'rate30m']) expect(burn).toContain(`gateway:http_error_ratio:${window}{namespace="gateway",release="gw"} > (6 * (1 - 0.999))`);

    const dashboards = ofKind('ConfigMap').filter((configMap) => configMap.metadata.labels?.grafana_dashboard === '1');
    expect(dashboards).toHaveLength(1);
    expect(JSON.parse(dashboards[0]!.data['gateway.json'])).toEqual(dashboardFile());
  });

  it("renders deploy/README.md's monitoring.yaml on its production install: KEDA, ServiceMonitors, alerts and dashboard for the kube-prometheus-stack", () => {
    const readme = readFileSync(`${root}deploy/README.md`, 'utf8');
    const block = /```yaml\n\s*# monitoring\.yaml\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block, 'deploy/README.md has the monitoring.yaml block').toBeDefined();
    const directory = mkdtempSync(join(tmpdir(), 'helm-monitoring-'));
    try {
      const file = join(directory, 'monitoring.yaml');
      // The block is indented under its list item; YAML reads it the same once dedented.
      const indent = /^( *)/.exec(block!.split('\n').find((line) => line.trim() !== '')!)![1]!.length;
      writeFileSync(file, block!.split('\n').map((line) => line.slice(indent)).join('\n'));
      const manifests = renderOk([...installs[0]!.args, '-f', file]);
      checkRelease(manifests, 'monitoring.yaml');
      const count = (kind: string) => manifests.filter((manifest) => manifest.kind === kind).length;
      expect([count('ScaledObject'), count('ServiceMonitor'), count('PrometheusRule'), count('HorizontalPodAutoscaler')]).toEqual([2, 7, 1, 5]);
      for (const manifest of manifests.filter((candidate) => ['ServiceMonitor', 'PrometheusRule'].includes(candidate.kind))) {
        expect(manifest.metadata.labels?.release, `${manifest.kind} ${manifest.metadata.name}: the stack's selector label`).toBe('prometheus');
      }
      const dashboard = manifests.find((manifest) => manifest.kind === 'ConfigMap' && manifest.metadata.labels?.grafana_dashboard === '1');
      expect(dashboard?.metadata.annotations).toEqual({ grafana_folder: 'Gateway' });
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('pods mode: the HPA of edge and routing also scales on their per-replica load through the custom metrics API', () => {
    const manifests = renderOk(['gw', 'helm/gateway', '--set', 'loadScaling.mode=pods', '--set', 'loadScaling.routing.activeStreams=40']);
    checkRelease(manifests, 'pods mode');
    expect(manifests.map((manifest) => manifest.kind)).not.toContain('ScaledObject');
    const hpaOf = (component: string) => manifests.find((manifest) => manifest.kind === 'HorizontalPodAutoscaler' && componentOf(manifest.metadata.labels) === component)!;
    const cpu = { type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 70 } } };
    const pods = (name: string, averageValue: string) => ({ type: 'Pods', pods: { metric: { name }, target: { type: 'AverageValue', averageValue } } });
    expect(hpaOf('edge').spec.metrics).toEqual([cpu, pods('gateway_http_requests_in_flight', '200'), pods('gateway_http_streams_active', '150')]);
    expect(hpaOf('routing').spec.metrics).toEqual([cpu, pods('gateway_routing_requests_in_flight', '200'), pods('gateway_routing_streams_active', '40')]);
    for (const component of ['auth', 'catalog', 'ledger', 'media', 'jobs']) expect(hpaOf(component).spec.metrics, component).toEqual([cpu]);
    // The default stays CPU alone for everyone.
    for (const hpa of renderOk(['gw', 'helm/gateway']).filter((manifest) => manifest.kind === 'HorizontalPodAutoscaler')) expect(hpa.spec.metrics).toEqual([cpu]);
  });

  it('the CRD schema checks catch a wrong custom resource (they pass only because the rendered ones are right)', () => {
    const manifests = renderOk(['gw', 'helm/gateway', '--set', 'loadScaling.mode=keda', ...MONITORING]);
    const scaler = structuredClone(manifests.find((manifest) => manifest.kind === 'ScaledObject')!);
    scaler.spec.triggers[1].metaData = scaler.spec.triggers[1].metadata;
    delete scaler.spec.triggers[1].metadata;
    expect(schemaProblems(scaler).join()).toMatch(/metadata/);
    const monitor = structuredClone(manifests.find((manifest) => manifest.kind === 'ServiceMonitor')!);
    monitor.spec.endpoints[0].relabelling = monitor.spec.endpoints[0].relabelings;
    expect(schemaProblems(monitor)).toEqual(['unknown field /spec/endpoints/0/relabelling']);
    const rule = structuredClone(manifests.find((manifest) => manifest.kind === 'PrometheusRule')!);
    delete rule.spec.groups[0].name;
    expect(schemaProblems(rule).join()).toMatch(/name/);
  });

  describe('PromQL of the alerts, the KEDA triggers and the dashboard', () => {
    let exported: Set<string>;
    let gatewayMetrics: string[];
    let stopStack: (() => Promise<void>) | undefined;

    // The names every service registers, read from the registry of a whole running stack (every
    // service in one process, as `npm start` runs them): what their /metrics endpoints export.
    beforeAll(async () => {
      const stack = await startObservedStack({ name: 'chart-metrics' });
      stopStack = stack.stop;
      const metrics = await stack.registry.getMetricsAsJSON();
      exported = exportedSeriesNames(metrics.map((metric) => ({ name: metric.name, type: String(metric.type) })));
      gatewayMetrics = metrics.map((metric) => metric.name).filter((name) => name.startsWith('gateway_'));
    }, 120_000);
    afterAll(async () => { await stopStack?.(); });

    // Series Prometheus makes itself for every target.
    const PROMETHEUS_SERIES = new Set(['up']);

    function unknownNames(expressions: { where: string; expr: string }[], recorded: Set<string>): string[] {
      const problems: string[] = [];
      for (const { where, expr } of expressions) {
        const { names, errors } = promqlNames(expr);
        for (const error of errors) problems.push(`${where}: ${error}`);
        if (names.length === 0) problems.push(`${where}: reads no series: ${expr}`);
        for (const name of names) if (!exported.has(name) && !recorded.has(name) && !PROMETHEUS_SERIES.has(name)) problems.push(`${where}: ${name} is not exported`);
      }
      return problems;
    }

    it('every expression parses and reads only series the services export (or the chart records)', () => {
      expect(exported.has('gateway_http_requests_total')).toBe(true);
      const manifests = renderOk(['gw', 'helm/gateway', '--set', 'loadScaling.mode=keda', ...MONITORING]);
      const rules = manifests.find((manifest) => manifest.kind === 'PrometheusRule')!.spec.groups.flatMap((group: any) => group.rules);
      const recorded = new Set<string>(rules.filter((entry: any) => entry.record).map((entry: any) => entry.record));
      expect(recorded.size).toBe(7);
      const ruleExpressions = rules.map((entry: any) => ({ where: entry.alert ?? entry.record, expr: entry.expr }));
      const triggers = manifests.filter((manifest) => manifest.kind === 'ScaledObject').flatMap((scaler) =>
        scaler.spec.triggers.filter((trigger: any) => trigger.type === 'prometheus').map((trigger: any) => ({ where: `${scaler.metadata.name} ${trigger.name}`, expr: trigger.metadata.query })));
      const dashboard = dashboardExpressions(dashboardFile());
      expect(dashboard.length).toBeGreaterThan(30);
      expect(unknownNames([...ruleExpressions, ...triggers, ...dashboard], recorded)).toEqual([]);

      // The pods mode's names are served by the custom metrics API under the exported names by default.
      const hpas = renderOk(['gw', 'helm/gateway', '--set', 'loadScaling.mode=pods']).filter((manifest) => manifest.kind === 'HorizontalPodAutoscaler');
      const podsMetrics = hpas.flatMap((hpa) => hpa.spec.metrics.filter((metric: any) => metric.type === 'Pods').map((metric: any) => metric.pods.metric.name as string));
      expect(podsMetrics.sort()).toEqual([...LOAD_GAUGES.edge, ...LOAD_GAUGES.routing].sort());
      for (const name of podsMetrics) expect(exported.has(name), name).toBe(true);

      // The dashboard covers what it is for: requests, latency, time to first token, tokens, spend, provider health, backlog, load.
      const read = new Set(dashboard.flatMap(({ expr }) => promqlNames(expr).names));
      for (const name of [
        'gateway_http_requests_total', 'gateway_http_request_duration_seconds_bucket', 'gateway_http_time_to_first_byte_seconds_bucket', 'gateway_usage_tokens_total',
        'gateway_usage_spend_credits_total', 'gateway_provider_circuit_open', 'gateway_upstream_attempts_total', 'gateway_usage_settlement_backlog_messages',
        'gateway_usage_outbox_records', ...LOAD_GAUGES.edge, ...LOAD_GAUGES.routing,
      ]) expect(read, name).toContain(name);
    });

    it('finds a name no service exports, and a PromQL syntax error (the check above can fail)', () => {
      expect(unknownNames([{ where: 'misspelt', expr: 'sum(rate(gateway_http_request_total[5m]))' }], new Set())).toEqual(['misspelt: gateway_http_request_total is not exported']);
      expect(unknownNames([{ where: 'broken', expr: 'sum(rate(gateway_http_requests_total[5m])' }], new Set()).join()).toMatch(/broken: syntax error/);
      expect(unknownNames([{ where: 'histogram', expr: 'gateway_http_request_duration_seconds_bucket{le="1"}' }], new Set())).toEqual([]);
    });

    it('docs/operations.md lists every gateway_ metric the services register', () => {
      const operations = readFileSync(`${root}docs/operations.md`, 'utf8');
      expect(gatewayMetrics.length).toBeGreaterThan(30);
      expect(gatewayMetrics.filter((name) => !operations.includes(`\`${name}\``))).toEqual([]);
    });
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
