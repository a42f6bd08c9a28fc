/**
 * The deployment files' promises (docs/DEPLOY.md), read as data: every YAML
 * file under deploy/ parses; the Kubernetes desktops probe /healthz and
 * /readyz on the daemon's port, run as the image's non-root uid with a
 * read-only root, no capabilities and memory for /dev/shm, have resources,
 * outlive the daemon's shutdown deadline, each derive a token of their own from
 * the fleet key in an init container (the daemon's container never mounts the
 * key) and are reachable only from the orchestrator's namespace; the Compose desktop is
 * published on the host's 127.0.0.1 only; no token is written anywhere; every
 * kustomization lists every manifest of its folder.
 *
 * Each pod is a pool of desktops (`--desktops N --warm M`, no DISPLAY), with
 * requests sized from the measured cost of a desktop; it leaves the routing
 * Service when full (readiness) but keeps its per-pod name (resume); its
 * preStop hook waits for its leased desktops within the grace period (run
 * here against a stand-in /readyz); the PodDisruptionBudget lets drains go
 * one pod at a time; the optional KEDA autoscaler (deploy/k8s-autoscale)
 * scales the StatefulSet on leased and waiting desktops, scales down slowly
 * and owns the replica count; the router's Role only reads.
 *
 * There is no cluster and no Docker engine on the machine these tests run on:
 * these checks are all the validation the files get here. The last test breaks
 * each promise on a copy and shows that its check fails.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFile, readdir } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, posix, relative, sep } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { DEFAULT_CONFIG, isLoopback } from '../src/base/config.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
const PORT = DEFAULT_CONFIG.port;

/**
 * The measured cost of one pool desktop on the machine that wrote these files (1280x800 Xvfb, openbox, the
 * desktop worker, headful Chromium with one page; PSS), and of the daemon itself (docs/DEPLOY.md, "Sizing").
 * A pod's memory request must cover at least these.
 */
const DESKTOP_PSS_MIB = 363;
const DAEMON_MIB = 190;

// ---------------------------------------------------------------- the model

interface YamlFile {
  /** Relative to deploy/, with forward slashes. */
  path: string;
  text: string;
  docs: unknown[];
}

/** What the image promises, read from the Dockerfile. */
interface Image {
  uid: number;
  volume: string;
}

interface Deploy {
  files: YamlFile[];
  image: Image;
  /** src/cli.ts exits this long after the shutdown deadline if the graceful path has not finished. */
  hardExitMarginMs: number;
}

async function yamlFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await yamlFiles(full)));
    else if (/\.ya?ml$/.test(entry.name)) out.push(full);
  }
  return out.sort();
}

async function load(): Promise<Deploy> {
  const files: YamlFile[] = [];
  for (const full of await yamlFiles(DEPLOY)) {
    const path = relative(DEPLOY, full).split(sep).join('/');
    const text = await readFile(full, 'utf8');
    const parsed = parseAllDocuments(text);
    const docs: unknown[] = [];
    for (const doc of parsed) {
      assert.deepEqual(
        doc.errors.map((e) => e.message),
        [],
        `${path} parses`,
      );
      assert.deepEqual(
        doc.warnings.map((e) => e.message),
        [],
        `${path} parses without warnings`,
      );
      docs.push(doc.toJS());
    }
    assert.ok(docs.length > 0 && docs.every((d) => d !== null), `${path} holds at least one non-empty document`);
    files.push({ path, text, docs });
  }

  const dockerfile = await readFile(join(ROOT, 'Dockerfile'), 'utf8');
  const uid = /useradd\b[^\n]*--uid (\d+)/.exec(dockerfile)?.[1];
  const volume = /^VOLUME \["([^"]+)"\]/m.exec(dockerfile)?.[1];
  assert.ok(uid && volume, 'the Dockerfile creates a user with --uid and declares one VOLUME');

  const cli = await readFile(join(ROOT, 'src', 'cli.ts'), 'utf8');
  const margin = /config\.shutdownDeadlineMs \+ ([\d_]+)/.exec(cli)?.[1];
  assert.ok(margin, 'src/cli.ts sets its hard exit at shutdownDeadlineMs + a margin');

  return {
    files,
    image: { uid: Number(uid), volume },
    hardExitMarginMs: Number(margin.replace(/_/g, '')),
  };
}

// Typed views of the few fields the checks read (kubectl and Compose accept far more).

interface HttpProbe {
  httpGet?: { path?: string; port?: number | string };
  periodSeconds?: number;
  timeoutSeconds?: number;
  failureThreshold?: number;
  successThreshold?: number;
}
interface SecurityContext {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  runAsGroup?: number;
  allowPrivilegeEscalation?: boolean;
  readOnlyRootFilesystem?: boolean;
  privileged?: boolean;
  capabilities?: { drop?: string[]; add?: string[] };
  seccompProfile?: { type?: string };
}
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name?: string; key?: string }; fieldRef?: { fieldPath?: string } };
}
interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number }[];
  startupProbe?: HttpProbe;
  livenessProbe?: HttpProbe;
  readinessProbe?: HttpProbe;
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  securityContext?: SecurityContext;
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
  lifecycle?: { preStop?: { exec?: { command?: string[] }; httpGet?: unknown; sleep?: unknown } };
}
interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  securityContext?: SecurityContext & { fsGroup?: number };
  automountServiceAccountToken?: boolean;
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  terminationGracePeriodSeconds?: number;
  volumes?: {
    name: string;
    emptyDir?: { medium?: string; sizeLimit?: string };
    secret?: { secretName?: string; defaultMode?: number };
  }[];
}
type Labels = Record<string, string>;
interface K8sObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; labels?: Labels; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: unknown;
  stringData?: unknown;
  resources?: unknown;
  rules?: PolicyRule[];
  roleRef?: { kind?: string; name?: string };
}
interface StatefulSet extends K8sObject {
  spec: {
    serviceName?: string;
    replicas?: number;
    updateStrategy?: { type?: string };
    selector?: { matchLabels?: Labels };
    template: { metadata?: { labels?: Labels; annotations?: Record<string, string> }; spec: PodSpec };
  };
}
interface NetworkPeer {
  namespaceSelector?: unknown;
  podSelector?: unknown;
  ipBlock?: { cidr: string; except?: string[] };
}
interface NetworkPolicy extends K8sObject {
  spec: {
    podSelector?: { matchLabels?: Labels };
    policyTypes?: string[];
    ingress?: { from?: NetworkPeer[]; ports?: { port?: number | string }[] }[];
    egress?: { to?: NetworkPeer[]; ports?: { port?: number | string }[] }[];
  };
}
interface Service extends K8sObject {
  spec: { clusterIP?: string; publishNotReadyAddresses?: boolean; selector?: Labels };
}
interface PodDisruptionBudget extends K8sObject {
  spec: {
    maxUnavailable?: number | string;
    minAvailable?: number | string;
    unhealthyPodEvictionPolicy?: string;
    selector?: { matchLabels?: Labels };
  };
}
interface HpaPolicy {
  type?: string;
  value?: number;
  periodSeconds?: number;
}
interface ScaledObject extends K8sObject {
  spec: {
    scaleTargetRef?: { apiVersion?: string; kind?: string; name?: string };
    minReplicaCount?: number;
    maxReplicaCount?: number;
    advanced?: {
      horizontalPodAutoscalerConfig?: {
        behavior?: { scaleDown?: { stabilizationWindowSeconds?: number; policies?: HpaPolicy[] } };
      };
    };
    triggers?: { type?: string; metricType?: string; metadata?: Record<string, string> }[];
  };
}
interface Kustomization extends K8sObject {
  namespace?: string;
  resources?: string[];
  patches?: { target?: { group?: string; kind?: string; name?: string }; patch?: string }[];
}
interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
}
interface ComposeService {
  image?: string;
  user?: string;
  ports?: (string | { published?: string | number; target?: number; host_ip?: string })[];
  environment?: Record<string, string> | string[];
  env_file?: unknown;
  volumes?: (string | { type?: string; source?: string; target?: string })[];
  shm_size?: string | number;
  ipc?: string;
  read_only?: boolean;
  tmpfs?: string | string[];
  cap_drop?: string[];
  cap_add?: string[];
  privileged?: boolean;
  network_mode?: string;
  restart?: string;
  stop_grace_period?: string;
  healthcheck?: { test?: string | string[]; disable?: boolean };
  command?: string | string[];
}
interface Compose {
  services?: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

/** The Kubernetes files: the fleet (deploy/k8s) and its optional autoscaler overlay (deploy/k8s-autoscale). */
const k8sFiles = (d: Deploy) => d.files.filter((f) => /^k8s(-[a-z]+)?\//.test(f.path));
const k8sObjects = (d: Deploy) => k8sFiles(d).flatMap((f) => f.docs as K8sObject[]);

function one<T extends K8sObject = K8sObject>(d: Deploy, kind: string): T {
  const found = k8sObjects(d).filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind} under deploy/k8s`);
  return found[0] as T;
}

function compose(d: Deploy): { file: Compose; service: ComposeService } {
  const f = d.files.find((x) => x.path === 'compose.yaml');
  assert.ok(f, 'deploy/compose.yaml exists');
  const file = f.docs[0] as Compose;
  const services = Object.values(file.services ?? {});
  assert.equal(services.length, 1, 'compose.yaml runs one desktop service');
  return { file, service: services[0]! };
}

function desktop(d: Deploy): { set: StatefulSet; pod: PodSpec; container: Container } {
  const set = one<StatefulSet>(d, 'StatefulSet');
  const pod = set.spec.template.spec;
  assert.equal(pod.containers.length, 1, 'one container per desktop pod');
  return { set, pod, container: pod.containers[0]! };
}

// ---------------------------------------------------------------- units

/** Kubernetes quantities: 500m, 2, 1Gi, 512Mi, 1G … in base units. */
function quantity(v: string | number | undefined, what: string): number {
  assert.ok(v !== undefined, `${what} is set`);
  const m = /^(\d+(?:\.\d+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(String(v));
  assert.ok(m, `${what} is a quantity: ${v}`);
  const unit: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
  };
  return Number(m[1]) * (m[2] ? unit[m[2]]! : 1);
}

/** Compose byte sizes: 1gb, 512m, 1073741824 (Docker counts k/m/g in powers of 1024). */
function byteSize(v: string | number | undefined, what: string): number {
  assert.ok(v !== undefined, `${what} is set`);
  const m = /^(\d+(?:\.\d+)?)\s*(b|k|kb|m|mb|g|gb)?$/i.exec(String(v));
  assert.ok(m, `${what} is a byte size: ${v}`);
  const power = { b: 0, k: 1, m: 2, g: 3 }[(m[2] ?? 'b')[0]!.toLowerCase() as 'b' | 'k' | 'm' | 'g'];
  return Number(m[1]) * 1024 ** power;
}

/** Compose durations: 30s, 1m30s, 1500ms. */
function durationMs(v: string | undefined, what: string): number {
  assert.ok(v !== undefined && /^(\d+(\.\d+)?(ms|s|m|h))+$/.test(v), `${what} is a duration: ${v}`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
  let total = 0;
  for (const [, n, u] of v.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) total += Number(n) * unit[u as keyof typeof unit];
  return total;
}

const subset = (sel: Labels | undefined, labels: Labels | undefined) =>
  sel !== undefined && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels?.[k] === v);

/** The longest the daemon can take from SIGTERM to exit. */
const shutdownMs = (d: Deploy) => DEFAULT_CONFIG.shutdownDeadlineMs + d.hardExitMarginMs;

// ---------------------------------------------------------------- the checks

/** Every folder of Kubernetes files has a kustomization that lists each of its manifests; bases it names exist. */
function checkKustomization(d: Deploy): void {
  const kustomizations = k8sFiles(d).filter((f) => posix.basename(f.path) === 'kustomization.yaml');
  assert.ok(
    kustomizations.some((k) => k.path === 'k8s/kustomization.yaml'),
    'deploy/k8s/kustomization.yaml exists',
  );
  const folders = new Set(kustomizations.map((k) => posix.dirname(k.path)));
  for (const f of k8sFiles(d)) assert.ok(folders.has(posix.dirname(f.path)), `${f.path} has a kustomization beside it`);
  for (const k of kustomizations) {
    const folder = posix.dirname(k.path);
    const listed = (k.docs[0] as Kustomization).resources ?? [];
    assert.equal(new Set(listed).size, listed.length, `${k.path}: no resource is listed twice`);
    const files = listed.filter((r) => /\.ya?ml$/.test(r));
    for (const base of listed.filter((r) => !files.includes(r))) {
      assert.ok(folders.has(posix.join(folder, base)), `${k.path}: ${base} is a folder with a kustomization`);
    }
    const manifests = k8sFiles(d)
      .filter((f) => f !== k && posix.dirname(f.path) === folder)
      .map((f) => posix.basename(f.path));
    assert.deepEqual(
      [...files].sort(),
      manifests.sort(),
      `${k.path} lists every manifest of its folder, and only those`,
    );
  }
}

function checkProbes(d: Deploy): void {
  const { container } = desktop(d);
  const ports = container.ports ?? [];
  assert.deepEqual(
    ports.map((p) => p.containerPort),
    [PORT],
    `the container exposes the daemon's port ${PORT}`,
  );
  const portOf = (p: number | string | undefined) =>
    typeof p === 'string' ? ports.find((x) => x.name === p)?.containerPort : p;
  const probes: [string, HttpProbe | undefined, string][] = [
    ['startupProbe', container.startupProbe, '/healthz'],
    ['livenessProbe', container.livenessProbe, '/healthz'],
    ['readinessProbe', container.readinessProbe, '/readyz'],
  ];
  for (const [name, probe, path] of probes) {
    assert.equal(probe?.httpGet?.path, path, `${name} asks ${path}`);
    assert.equal(portOf(probe?.httpGet?.port), PORT, `${name} asks the container port`);
  }
}

function checkNonRoot(d: Deploy): void {
  const { pod, container } = desktop(d);
  // Every container of the pod, init containers included (the restricted Pod Security Standard asks it of all).
  for (const c of [container, ...(pod.initContainers ?? [])]) {
    const eff = <K extends keyof SecurityContext>(k: K) => c.securityContext?.[k] ?? pod.securityContext?.[k];
    const who = `container ${c.name}`;
    assert.equal(eff('runAsNonRoot'), true, `${who}: runAsNonRoot`);
    assert.equal(eff('runAsUser'), d.image.uid, `${who} runs as the image's uid ${d.image.uid}`);
    assert.notEqual(eff('runAsUser'), 0);
    assert.notEqual(eff('runAsGroup'), 0, `${who}: not the root group`);
    assert.equal(c.securityContext?.allowPrivilegeEscalation, false, `${who}: no privilege escalation`);
    assert.notEqual(c.securityContext?.privileged, true, `${who}: not privileged`);
    assert.equal(c.securityContext?.readOnlyRootFilesystem, true, `${who}: read-only root filesystem`);
    assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL'], `${who}: every capability dropped`);
    assert.deepEqual(c.securityContext?.capabilities?.add ?? [], [], `${who}: none added`);
    assert.equal(eff('seccompProfile')?.type, 'RuntimeDefault', `${who}: seccomp RuntimeDefault`);
  }
  assert.equal(pod.automountServiceAccountToken, false, 'no service account token in the pod');
  assert.ok(!pod.hostNetwork && !pod.hostPID && !pod.hostIPC, 'no host namespaces');
  // With a read-only root, these are the only places anything is written (Xvfb, Chromium, tsx; screenshots, downloads).
  const mounts = (container.volumeMounts ?? []).map((m) => m.mountPath);
  for (const path of ['/tmp', d.image.volume]) assert.ok(mounts.includes(path), `${path} is a writable volume`);
}

function checkShm(d: Deploy): void {
  const { pod, container } = desktop(d);
  const mount = container.volumeMounts?.find((m) => m.mountPath === '/dev/shm');
  assert.ok(mount, '/dev/shm is mounted');
  const volume = pod.volumes?.find((v) => v.name === mount.name);
  assert.equal(volume?.emptyDir?.medium, 'Memory', '/dev/shm is a memory-backed emptyDir');
  assert.ok(quantity(volume?.emptyDir?.sizeLimit, '/dev/shm sizeLimit') >= 2 ** 29, '/dev/shm holds at least 512 MiB');
}

function checkResources(d: Deploy): void {
  const { pod, container } = desktop(d);
  for (const r of ['cpu', 'memory']) {
    const request = quantity(container.resources?.requests?.[r], `requests.${r}`);
    const limit = quantity(container.resources?.limits?.[r], `limits.${r}`);
    assert.ok(request > 0 && request <= limit, `${r}: 0 < request <= limit`);
  }
  const shm = pod.volumes?.find((v) => v.emptyDir?.medium === 'Memory')?.emptyDir?.sizeLimit;
  if (shm !== undefined) {
    assert.ok(
      quantity(container.resources?.limits?.memory, 'limits.memory') > quantity(shm, 'shm'),
      'the memory limit leaves room beyond /dev/shm, which counts against it',
    );
  }
}

function checkShutdown(d: Deploy): void {
  const { pod } = desktop(d);
  const grace = pod.terminationGracePeriodSeconds;
  assert.ok(grace !== undefined, 'terminationGracePeriodSeconds is set');
  assert.ok(grace * 1000 > shutdownMs(d), `grace ${grace} s outlasts the daemon's shutdown (${shutdownMs(d)} ms)`);
}

/**
 * One token per pod: an init container derives it from the fleet key (a Secret volume) and the pod's name and
 * uid, into a memory-backed emptyDir; the daemon reads it through DESKBATCH_TOKEN_FILE and never mounts the key.
 */
function checkPerPodToken(d: Deploy): void {
  const { pod, container } = desktop(d);
  const env = (c: Container, name: string) => c.env?.filter((e) => e.name === name) ?? [];
  assert.deepEqual(env(container, 'DESKBATCH_TOKEN'), [], 'no DESKBATCH_TOKEN: no token shared by the fleet');
  const file = env(container, 'DESKBATCH_TOKEN_FILE');
  assert.equal(file.length, 1, 'DESKBATCH_TOKEN_FILE is set once');
  const path = file[0]!.value ?? '';
  const mountOf = (c: Container) => c.volumeMounts?.find((m) => path.startsWith(`${m.mountPath.replace(/\/$/, '')}/`));
  const mount = mountOf(container);
  assert.ok(mount, `the token file ${path} is on a volume`);
  assert.equal(mount.readOnly, true, "the daemon's container mounts the token read-only");
  const volume = pod.volumes?.find((v) => v.name === mount.name);
  assert.equal(volume?.emptyDir?.medium, 'Memory', 'the token volume is memory-backed (never on the node disk)');
  const secretVolumes = new Set((pod.volumes ?? []).filter((v) => v.secret).map((v) => v.name));
  assert.ok(
    !(container.volumeMounts ?? []).some((m) => secretVolumes.has(m.name)),
    "the daemon's container mounts no Secret: the fleet key never reaches it",
  );
  for (const e of container.env ?? []) assert.equal(e.valueFrom?.secretKeyRef, undefined, `${e.name}: no Secret`);
  const writers = (pod.initContainers ?? []).filter((c) => mountOf(c)?.name === mount.name && !mountOf(c)?.readOnly);
  assert.equal(writers.length, 1, 'one init container writes the token');
  const writer = writers[0]!;
  const script = [...(writer.command ?? []), ...(writer.args ?? [])].join('\n');
  assert.ok(script.includes(path), 'it writes the file the daemon reads');
  assert.ok(
    (writer.volumeMounts ?? []).some((m) => secretVolumes.has(m.name) && m.readOnly),
    'it reads the fleet key from a Secret, read-only',
  );
  const fields = (writer.env ?? []).map((e) => e.valueFrom?.fieldRef?.fieldPath);
  for (const f of ['metadata.name', 'metadata.uid']) {
    assert.ok(fields.includes(f), `the token depends on ${f}: per pod, and new when the pod is recycled`);
  }
  assert.match(script, /createHmac\('sha256'/, 'an HMAC of the key, so the key cannot be read back from a token');
  for (const o of k8sObjects(d).filter((x) => x.kind === 'Secret')) {
    assert.ok(o.data === undefined && o.stringData === undefined, `Secret ${o.metadata?.name} carries no data`);
  }
  // The image's CMD binds 0.0.0.0; an override must too, or the probes and clients cannot reach it.
  const argv = [...(container.command ?? []), ...(container.args ?? [])];
  if (argv.length) {
    const host = argv[argv.indexOf('--host') + 1];
    assert.ok(argv.includes('--host') && host && !isLoopback(host), 'an overriding command binds beyond loopback');
  }
}

function checkSelectors(d: Deploy): void {
  const { set } = desktop(d);
  const labels = set.spec.template.metadata?.labels;
  assert.ok(subset(set.spec.selector?.matchLabels, labels), 'the StatefulSet selects its own pods');
  const services = k8sObjects(d).filter((o) => o.kind === 'Service');
  const headless = services.find((s) => s.metadata?.name === set.spec.serviceName);
  assert.ok(headless, `the Service ${set.spec.serviceName} named by serviceName exists`);
  assert.equal(headless.spec?.clusterIP, 'None', 'it is headless: one DNS name per pod');
  assert.ok(subset(headless.spec?.selector as Labels, labels), 'it selects the desktops');
  const pdb = one(d, 'PodDisruptionBudget');
  assert.ok(subset((pdb.spec?.selector as { matchLabels?: Labels })?.matchLabels, labels), 'the PDB covers them');
  const np = one<NetworkPolicy>(d, 'NetworkPolicy');
  assert.ok(subset(np.spec.podSelector?.matchLabels, labels), 'the NetworkPolicy covers them');
}

function checkNetworkPolicy(d: Deploy): void {
  const np = one<NetworkPolicy>(d, 'NetworkPolicy');
  assert.ok(np.spec.policyTypes?.includes('Ingress') && np.spec.policyTypes.includes('Egress'), 'ingress and egress');
  const ingress = np.spec.ingress ?? [];
  assert.ok(ingress.length > 0, 'some ingress is allowed (else nothing reaches the daemon)');
  for (const rule of ingress) {
    assert.ok(rule.from?.length, 'every ingress rule names its sources (an empty one allows everyone)');
    for (const peer of rule.from) {
      assert.ok(peer.namespaceSelector && !peer.ipBlock, 'sources are namespaces, never address blocks');
      const labels = (peer.namespaceSelector as { matchLabels?: Labels }).matchLabels;
      assert.ok(labels && Object.keys(labels).length > 0, 'the namespace selector names a namespace');
    }
    assert.deepEqual(
      rule.ports?.map((p) => p.port),
      [PORT],
      "only the daemon's port",
    );
  }
  for (const rule of np.spec.egress ?? []) {
    for (const peer of rule.to ?? [{}]) {
      if (!peer.ipBlock && !peer.namespaceSelector && !peer.podSelector)
        assert.fail('an egress rule allows everything');
      if (peer.ipBlock?.cidr === '0.0.0.0/0') {
        for (const net of ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16']) {
          assert.ok(peer.ipBlock.except?.includes(net), `egress to ${net} (cluster, metadata) is refused`);
        }
      }
    }
  }
}

function checkPrometheus(d: Deploy): void {
  const { set } = desktop(d);
  const a = set.spec.template.metadata?.annotations ?? {};
  assert.equal(a['prometheus.io/path'], '/metrics');
  assert.equal(Number(a['prometheus.io/port']), PORT, 'metrics are on the daemon port');
}

function checkCompose(d: Deploy): void {
  const { file, service } = compose(d);
  assert.ok(service.ports?.length, 'the port is published');
  for (const p of service.ports) {
    const m = typeof p === 'string' ? /^(\d+\.\d+\.\d+\.\d+):(\d+):(\d+)(\/tcp)?$/.exec(p) : null;
    assert.ok(m, `ports use HOST_IP:HOST_PORT:CONTAINER_PORT: ${JSON.stringify(p)}`);
    assert.equal(m[1], '127.0.0.1', "published on the host's 127.0.0.1 only");
    assert.equal(Number(m[3]), PORT, "to the daemon's port");
  }
  assert.ok(!service.network_mode?.startsWith('host'), 'not on the host network');
  const env = service.environment;
  assert.ok(env && !Array.isArray(env), 'environment is a map');
  assert.match(env.DESKBATCH_TOKEN ?? '', /^\$\{DESKBATCH_TOKEN:\?[^}]+\}$/, 'the token is required from outside');
  assert.ok(service.user === undefined || !/^(root|0)(:|$)/.test(service.user), 'not root');
  assert.ok(service.privileged !== true && !service.cap_add?.length, 'no privileges added');
  assert.deepEqual(service.cap_drop, ['ALL'], 'every capability dropped');
  assert.ok(
    service.ipc === 'host' || byteSize(service.shm_size, 'shm_size') >= 2 ** 29,
    'Chromium gets at least 512 MiB of /dev/shm',
  );
  assert.equal(service.read_only, true, 'read-only root filesystem');
  const tmpfs = [service.tmpfs ?? []].flat().map((t) => t.split(':')[0]);
  assert.ok(tmpfs.includes('/tmp'), '/tmp is a tmpfs');
  const data = service.volumes?.find((v) => (typeof v === 'string' ? v.split(':')[1] : v.target) === d.image.volume);
  const source = typeof data === 'string' ? data.split(':')[0] : data?.source;
  assert.ok(source && file.volumes && source in file.volumes, `a named volume holds ${d.image.volume}`);
  assert.ok(['always', 'unless-stopped', 'on-failure'].includes(service.restart ?? ''), 'a restart policy');
  assert.ok(
    durationMs(service.stop_grace_period, 'stop_grace_period') > shutdownMs(d),
    "stop_grace_period outlasts the daemon's shutdown",
  );
  const probe = [service.healthcheck?.test ?? []].flat().join(' ');
  assert.ok(!service.healthcheck?.disable, 'the health check is on');
  assert.match(probe, new RegExp(`http://127\\.0\\.0\\.1:${PORT}/(readyz|healthz)\\b`), 'it asks the daemon');
}

const flag = (argv: string[], name: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : undefined);

/**
 * Each pod is a pool: `--desktops N` given (the computed default sees the node's cores and memory, not the pod's),
 * `--warm M` at most N, no DISPLAY (with one the daemon falls back to one shared desktop), and memory for N
 * desktops as measured, with /dev/shm full to its limit.
 */
function checkPool(d: Deploy): void {
  const { pod, container } = desktop(d);
  const argv = [...(container.command ?? []), ...(container.args ?? [])];
  const n = Number(flag(argv, '--desktops'));
  const m = Number(flag(argv, '--warm'));
  assert.ok(Number.isInteger(n) && n >= 1, `--desktops N is given: ${n}`);
  assert.ok(Number.isInteger(m) && m >= 0 && m <= n, `--warm M with 0 <= M <= N: ${m}`);
  assert.ok(!(container.env ?? []).some((e) => e.name === 'DISPLAY'), 'no DISPLAY: every session gets its own desktop');
  const mib = 2 ** 20;
  const measured = (DAEMON_MIB + n * DESKTOP_PSS_MIB) * mib;
  const request = quantity(container.resources?.requests?.memory, 'requests.memory');
  const limit = quantity(container.resources?.limits?.memory, 'limits.memory');
  assert.ok(request >= measured, `the memory request covers the daemon and ${n} desktops as measured`);
  const shmMount = container.volumeMounts?.find((v) => v.mountPath === '/dev/shm');
  const shm = pod.volumes?.find((v) => v.name === shmMount?.name)?.emptyDir?.sizeLimit;
  assert.ok(
    limit - quantity(shm, '/dev/shm sizeLimit') >= measured,
    'a full /dev/shm leaves the desktops their memory',
  );
  const disk = (pod.volumes ?? []).filter((v) => v.emptyDir && v.emptyDir.medium !== 'Memory');
  const onDisk = disk.reduce((sum, v) => sum + quantity(v.emptyDir?.sizeLimit, `${v.name} sizeLimit`), 0);
  assert.ok(
    quantity(container.resources?.limits?.['ephemeral-storage'], 'limits.ephemeral-storage') > onDisk,
    'the ephemeral-storage limit holds the disk volumes full, and logs beside them',
  );
}

/**
 * Two Services: the StatefulSet's own gives each pod a name that resolves whatever its readiness (a full or
 * draining pod's sessions reconnect and resume through it); another lists only Ready pods, those with a free
 * desktop, for new sessions. Both headless. Readiness notices a full pod within 10 s.
 */
function checkServices(d: Deploy): void {
  const { set, container } = desktop(d);
  const labels = set.spec.template.metadata?.labels;
  const services = k8sObjects(d).filter((o) => o.kind === 'Service') as Service[];
  const perPod = services.find((s) => s.metadata?.name === set.spec.serviceName);
  assert.ok(perPod, `the Service ${set.spec.serviceName} named by serviceName exists`);
  assert.equal(perPod.spec.publishNotReadyAddresses, true, 'per-pod names resolve whatever the readiness (resume)');
  const routing = services.filter((s) => s !== perPod && subset(s.spec.selector, labels));
  assert.ok(routing.length > 0, 'another Service selects the desktops, for new sessions');
  for (const s of routing) {
    assert.notEqual(s.spec.publishNotReadyAddresses, true, `${s.metadata?.name} lists only pods with a free desktop`);
    assert.equal(s.spec.clusterIP, 'None', `${s.metadata?.name} is headless: no virtual IP places sessions at random`);
  }
  const r = container.readinessProbe;
  const lag = (r?.periodSeconds ?? 10) * (r?.failureThreshold ?? 3);
  assert.ok(lag <= 10, `a full pod is unready within 10 s (period × failureThreshold = ${lag} s)`);
}

/** The drain: a preStop hook that waits on the daemon's leased desktops and waiting sessions, within the grace. */
function preStopScript(d: Deploy): { command: string[]; script: string } {
  const command = desktop(d).container.lifecycle?.preStop?.exec?.command ?? [];
  assert.equal(command[0], 'node', 'the preStop hook runs node (the image has no curl)');
  return { command, script: command.at(-1) ?? '' };
}

function checkDrain(d: Deploy): void {
  const { set, pod } = desktop(d);
  const { script } = preStopScript(d);
  assert.ok(script.includes(`http://127.0.0.1:${PORT}/readyz`), "it asks the daemon's /readyz");
  assert.match(script, /\.leased\b[^\n]*\.waiting\b/, 'it waits on leased desktops and waiting sessions');
  const drain = Number(/\bdrainSeconds = (\d+)/.exec(script)?.[1]);
  assert.ok(drain > 0, 'the drain has a budget');
  const longest = DEFAULT_CONFIG.limits.maxBatchMs + DEFAULT_CONFIG.sessionGraceMs;
  assert.ok(drain * 1000 >= longest, "the drain outlasts a batch at its longest and a session's resume window");
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  assert.ok(drain * 1000 + shutdownMs(d) < grace * 1000, `the drain and the daemon's shutdown fit in ${grace} s`);
  const a = set.spec.template.metadata?.annotations ?? {};
  assert.equal(a['cluster-autoscaler.kubernetes.io/safe-to-evict'], 'false', 'no node consolidation evicts a pod');
}

/** Evictions take one pod at a time and never block forever; not-Ready (full) pods only within the budget. */
function checkDisruptionBudget(d: Deploy): void {
  const pdb = one<PodDisruptionBudget>(d, 'PodDisruptionBudget');
  assert.equal(pdb.spec.minAvailable, undefined, 'maxUnavailable, which follows the replica count');
  assert.equal(pdb.spec.maxUnavailable, 1, 'one pod at a time (0 would block every node drain)');
  assert.equal(pdb.spec.unhealthyPodEvictionPolicy, 'IfHealthyBudget', 'full (not Ready) pods only within the budget');
}

/**
 * The optional autoscaler: KEDA's Prometheus scaler on the StatefulSet, on leased desktops and waiting sessions
 * per pod's desktops, never to zero, holding the count when metrics are lost, scaling down one pod at a time
 * after a window; the overlay that adds it removes the StatefulSet's replicas, so that applying never fights it.
 */
function checkAutoscaler(d: Deploy): void {
  const { set } = desktop(d);
  const file = k8sFiles(d).find((f) => f.docs.some((o) => (o as K8sObject).kind === 'ScaledObject'));
  assert.ok(file, 'a ScaledObject exists');
  assert.ok(!file.path.startsWith('k8s/'), 'outside deploy/k8s: applying it without KEDA would fail');
  const so = one<ScaledObject>(d, 'ScaledObject');
  const ref = so.spec.scaleTargetRef;
  assert.deepEqual([ref?.apiVersion, ref?.kind, ref?.name], ['apps/v1', 'StatefulSet', set.metadata?.name]);
  const min = so.spec.minReplicaCount ?? 0;
  assert.ok(min >= 1 && (so.spec.maxReplicaCount ?? 0) >= min, 'never to zero; max at least min');
  assert.equal(so.spec.triggers?.length, 1, 'one trigger');
  const t = so.spec.triggers[0]!;
  assert.equal(t.type, 'prometheus');
  assert.equal(t.metricType ?? 'AverageValue', 'AverageValue', 'replicas = ceil(demand / threshold)');
  const query = t.metadata?.query ?? '';
  for (const part of [
    /deskbatch_desktops\{[^}]*state="leased"/,
    /deskbatch_desktop_waiting_sessions\b/,
    /\/\s*avg\(deskbatch_desktops_max\b/,
  ]) {
    assert.match(query, part, 'demand in pods: (leased + waiting) / desktops per pod');
  }
  const threshold = Number(t.metadata?.threshold);
  assert.ok(threshold > 0 && threshold < 1, 'the target leaves desktops free: a fraction of a pod');
  assert.equal(t.metadata?.ignoreNullValues, 'false', 'lost metrics hold the count instead of scaling down');
  const down = so.spec.advanced?.horizontalPodAutoscalerConfig?.behavior?.scaleDown;
  assert.ok((down?.stabilizationWindowSeconds ?? 0) >= 300, 'scale-down waits out short lulls');
  const policies = down?.policies ?? [];
  assert.ok(
    policies.length > 0 && policies.every((p) => p.type === 'Pods' && p.value === 1),
    'one pod removed at a time: each removal drains a pod',
  );
  const overlay = d.files.find((f) => f.path === posix.join(posix.dirname(file.path), 'kustomization.yaml'));
  const k = overlay?.docs[0] as Kustomization | undefined;
  assert.ok(k, "the ScaledObject's folder has a kustomization");
  assert.ok(k.resources?.includes('../k8s'), 'the overlay builds on deploy/k8s');
  assert.equal(k.namespace, 'deskbatch', "the overlay's objects go to the desktops' namespace");
  const ops = (k.patches ?? [])
    .filter((p) => p.target?.kind === 'StatefulSet' && p.target.name === set.metadata?.name)
    .flatMap((p) => parseYaml(p.patch ?? '[]') as { op?: string; path?: string }[]);
  assert.ok(
    ops.some((o) => o.op === 'remove' && o.path === '/spec/replicas'),
    "the overlay removes the StatefulSet's replicas: KEDA owns the count",
  );
}

/** The router's Role reads pods and EndpointSlices in this namespace, nothing else. */
function checkRouterRole(d: Deploy): void {
  const roles = k8sObjects(d).filter((o) => o.kind === 'Role' || o.kind === 'ClusterRole');
  assert.ok(roles.length > 0, 'a Role for the router');
  for (const role of roles) {
    assert.equal(role.kind, 'Role', `${role.metadata?.name}: namespaced`);
    for (const rule of role.rules ?? []) {
      for (const v of rule.verbs ?? []) assert.ok(['get', 'list', 'watch'].includes(v), `read only, not ${v}`);
      for (const r of rule.resources ?? []) assert.ok(['pods', 'endpointslices'].includes(r), `not ${r}`);
    }
  }
  for (const b of k8sObjects(d).filter((o) => o.kind === 'RoleBinding' || o.kind === 'ClusterRoleBinding')) {
    assert.equal(b.kind, 'RoleBinding', `${b.metadata?.name}: namespaced`);
    assert.ok(
      roles.some((r) => r.metadata?.name === b.roleRef?.name && b.roleRef?.kind === 'Role'),
      'it binds that Role',
    );
  }
}

/**
 * Strings that look like a token (16+ of its characters, half the daemon's minimum of 32, to catch a pasted
 * part too) and look random: digits and letters mixed.
 */
function tokenLike(text: string): string[] {
  return [...text.matchAll(/[A-Za-z0-9._~-]{16,}/g)]
    .map((m) => m[0])
    .filter((s) => (s.match(/\d/g) ?? []).length >= 4 && (s.match(/[A-Za-z]/g) ?? []).length >= 4)
    .filter((s) => !/^\d+\.\d+\.\d+\.\d+/.test(s));
}

function checkNoToken(d: Deploy): void {
  for (const f of d.files) assert.deepEqual(tokenLike(f.text), [], `no token-like string in deploy/${f.path}`);
}

const CHECKS: Record<string, (d: Deploy) => void> = {
  checkKustomization,
  checkProbes,
  checkNonRoot,
  checkShm,
  checkResources,
  checkShutdown,
  checkPerPodToken,
  checkSelectors,
  checkNetworkPolicy,
  checkPrometheus,
  checkCompose,
  checkNoToken,
  checkPool,
  checkServices,
  checkDrain,
  checkDisruptionBudget,
  checkAutoscaler,
  checkRouterRole,
};

// ---------------------------------------------------------------- the tests

test('every YAML file under deploy/ parses, and the kustomization lists every manifest', async () => {
  const d = await load();
  assert.ok(d.files.some((f) => f.path === 'compose.yaml'));
  assert.ok(k8sFiles(d).length >= 2);
  for (const o of k8sObjects(d)) assert.ok(o.apiVersion && o.kind, 'every document has apiVersion and kind');
  checkKustomization(d);
});

test('desktop pods: /healthz for startup and liveness, /readyz for readiness, on the container port', async () => {
  checkProbes(await load());
});

test("desktop pods run as the image's non-root uid, read-only, without capabilities or an API token", async () => {
  checkNonRoot(await load());
});

test('desktop pods: /dev/shm in memory, resources set, a grace period longer than the shutdown deadline', async () => {
  const d = await load();
  checkShm(d);
  checkResources(d);
  checkShutdown(d);
});

test('each pod derives its own token from the fleet key, which its daemon never sees; no token in any file', async () => {
  const d = await load();
  checkPerPodToken(d);
  checkNoToken(d);
});

test('selectors, the per-pod Service, the NetworkPolicy and the metrics annotations agree with the pods', async () => {
  const d = await load();
  checkSelectors(d);
  checkNetworkPolicy(d);
  checkPrometheus(d);
});

test('each pod is a pool of desktops, sized for them as measured, with no DISPLAY', async () => {
  checkPool(await load());
});

test('per-pod names resolve whatever the readiness; new sessions go only to pods with a free desktop', async () => {
  checkServices(await load());
});

test('leased desktops finish: a preStop drain within the grace, one eviction at a time, no consolidation', async () => {
  const d = await load();
  checkDrain(d);
  checkDisruptionBudget(d);
});

test('the optional KEDA autoscaler: leased and waiting desktops, never to zero, slow scale-down, owns the count', async () => {
  checkAutoscaler(await load());
});

test("the router's Role only reads pods and EndpointSlices", async () => {
  checkRouterRole(await load());
});

test('the preStop hook waits while a desktop is leased or a session waits, and stops when none is or the daemon is gone', async () => {
  const d = await load();
  const { command, script } = preStopScript(d);
  const pollSleep = 'setTimeout(resolve, 5000)';
  const url = `http://127.0.0.1:${PORT}/readyz`;
  assert.ok(script.includes(pollSleep) && script.includes(url), 'the script polls /readyz every 5 s');
  // A stand-in /readyz with what the pool answers (docs/OPERATIONS.md): 503 no_free_desktop when all are leased.
  const pool = (leased: number, waiting: number) => ({
    status: leased < 4 ? 'ready' : 'not_ready',
    ...(leased < 4 ? {} : { reason: 'no_free_desktop' }),
    desktops: { mode: 'pool', max: 4, free: 4 - leased, leased, waiting },
  });
  let answer: unknown = pool(4, 1);
  let asked = 0;
  const server = createServer((_req, res) => {
    asked += 1;
    const ready = (answer as { status?: string }).status === 'ready';
    res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const fast = script.replace(url, `http://127.0.0.1:${port}/readyz`).replace(pollSleep, 'setTimeout(resolve, 20)');
  const run = () => {
    const child = spawn(process.execPath, [...command.slice(1, -1), fast], { stdio: 'inherit' });
    const state = { exited: false };
    const code = once(child, 'exit').then(([c]) => ((state.exited = true), c as number | null));
    return { state, code };
  };
  // Waits until the script has asked /readyz `n` more times (so it has seen the current answer), or has ended.
  const pollsLater = async (script: { exited: boolean }, n: number) => {
    const target = asked + n;
    const deadline = Date.now() + 20_000;
    while (asked < target && !script.exited && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(asked >= target || script.exited, `the script asked /readyz ${n} more times, or ended`);
  };
  try {
    const busy = run();
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while every desktop is leased');
    answer = pool(1, 0);
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while one desktop is leased');
    answer = pool(0, 1);
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while a session waits');
    answer = pool(0, 0);
    assert.equal(await busy.code, 0, 'it ends when no desktop is leased and no session waits');

    answer = { status: 'ready', display: { width: 1280, height: 800 }, browser: 'ok' };
    assert.equal(await run().code, 0, 'a daemon without a pool has nothing to drain');

    answer = pool(4, 0);
    const gone = run();
    await pollsLater(gone.state, 3);
    assert.ok(!gone.state.exited, 'it waits');
    server.closeAllConnections();
    server.close();
    assert.equal(await gone.code, 0, 'it ends when the daemon no longer answers');
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('compose: host 127.0.0.1 only, the token required, /dev/shm, read-only, a health check and a restart policy', async () => {
  checkCompose(await load());
});

test('each check fails on a copy that breaks its promise', async () => {
  const d = await load();
  const token = randomBytes(32).toString('hex');
  const mutations: [string, keyof typeof CHECKS, (c: Deploy) => void][] = [
    [
      'a manifest left out of the kustomization',
      'checkKustomization',
      (c) => {
        c.files.push({ path: 'k8s/extra.yaml', text: '', docs: [{ apiVersion: 'v1', kind: 'ConfigMap' }] });
      },
    ],
    [
      'liveness on /readyz',
      'checkProbes',
      (c) => {
        desktop(c).container.livenessProbe!.httpGet!.path = '/readyz';
      },
    ],
    [
      'readiness on another port',
      'checkProbes',
      (c) => {
        desktop(c).container.readinessProbe!.httpGet!.port = PORT + 1;
      },
    ],
    [
      'running as root',
      'checkNonRoot',
      (c) => {
        const { pod, container } = desktop(c);
        delete container.securityContext!.runAsUser;
        pod.securityContext!.runAsUser = 0;
      },
    ],
    [
      'a writable root',
      'checkNonRoot',
      (c) => {
        desktop(c).container.securityContext!.readOnlyRootFilesystem = false;
      },
    ],
    [
      '/dev/shm on disk',
      'checkShm',
      (c) => {
        for (const v of desktop(c).pod.volumes ?? []) if (v.emptyDir?.medium) delete v.emptyDir.medium;
      },
    ],
    [
      'no memory limit',
      'checkResources',
      (c) => {
        delete desktop(c).container.resources!.limits!.memory;
      },
    ],
    [
      'the default grace period is kept short',
      'checkShutdown',
      (c) => {
        desktop(c).pod.terminationGracePeriodSeconds = DEFAULT_CONFIG.shutdownDeadlineMs / 1000;
      },
    ],
    [
      'a literal token in the pod',
      'checkPerPodToken',
      (c) => {
        desktop(c).container.env!.push({ name: 'DESKBATCH_TOKEN', value: token });
      },
    ],
    [
      'one fleet-wide token from a Secret again',
      'checkPerPodToken',
      (c) => {
        const { container } = desktop(c);
        container.env = [
          { name: 'DESKBATCH_TOKEN', valueFrom: { secretKeyRef: { name: 'deskbatch-token', key: 'token' } } },
        ];
      },
    ],
    [
      "the fleet key mounted in the daemon's container",
      'checkPerPodToken',
      (c) => {
        const { pod, container } = desktop(c);
        const key = pod.volumes!.find((v) => v.secret)!;
        container.volumeMounts!.push({ name: key.name, mountPath: '/etc/deskbatch/fleet-key', readOnly: true });
      },
    ],
    [
      'the token on the node disk',
      'checkPerPodToken',
      (c) => {
        const { pod } = desktop(c);
        for (const v of pod.volumes ?? []) if (v.name === 'token') delete v.emptyDir!.medium;
      },
    ],
    [
      'a token that survives recycling (no pod uid)',
      'checkPerPodToken',
      (c) => {
        const init = desktop(c).pod.initContainers![0]!;
        init.env = init.env!.filter((e) => e.valueFrom?.fieldRef?.fieldPath !== 'metadata.uid');
      },
    ],
    [
      'an init container with privilege escalation',
      'checkNonRoot',
      (c) => {
        desktop(c).pod.initContainers![0]!.securityContext!.allowPrivilegeEscalation = true;
      },
    ],
    [
      'a token pasted into a file',
      'checkNoToken',
      (c) => {
        c.files[0]!.text += `\n# DESKBATCH_TOKEN=${token}\n`;
      },
    ],
    [
      'a Service selecting other pods',
      'checkSelectors',
      (c) => {
        const s = k8sObjects(c).find((o) => o.kind === 'Service')!;
        s.spec!.selector = { app: 'other' };
      },
    ],
    [
      'ingress from anywhere',
      'checkNetworkPolicy',
      (c) => {
        one<NetworkPolicy>(c, 'NetworkPolicy').spec.ingress!.push({ from: [{ ipBlock: { cidr: '0.0.0.0/0' } }] });
      },
    ],
    [
      'egress to the metadata endpoint',
      'checkNetworkPolicy',
      (c) => {
        for (const r of one<NetworkPolicy>(c, 'NetworkPolicy').spec.egress ?? []) {
          for (const p of r.to ?? []) if (p.ipBlock) p.ipBlock.except = [];
        }
      },
    ],
    [
      'metrics on another port',
      'checkPrometheus',
      (c) => {
        desktop(c).set.spec.template.metadata!.annotations!['prometheus.io/port'] = '9090';
      },
    ],
    [
      'no --desktops: the default sees the node',
      'checkPool',
      (c) => {
        const { container } = desktop(c);
        const i = container.args!.indexOf('--desktops');
        container.args!.splice(i, 2);
      },
    ],
    [
      'more warm desktops than desktops',
      'checkPool',
      (c) => {
        const args = desktop(c).container.args!;
        args[args.indexOf('--warm') + 1] = String(Number(args[args.indexOf('--desktops') + 1]) + 1);
      },
    ],
    [
      'a DISPLAY: one shared desktop again',
      'checkPool',
      (c) => {
        desktop(c).container.env!.push({ name: 'DISPLAY', value: ':0' });
      },
    ],
    [
      'a memory request of one desktop',
      'checkPool',
      (c) => {
        desktop(c).container.resources!.requests!.memory = '1Gi';
      },
    ],
    [
      'per-pod names only while Ready: a full pod cannot be resumed on',
      'checkServices',
      (c) => {
        for (const s of k8sObjects(c) as Service[])
          if (s.metadata?.name === desktop(c).set.spec.serviceName) s.spec.publishNotReadyAddresses = false;
      },
    ],
    [
      'the routing Service lists full pods',
      'checkServices',
      (c) => {
        for (const s of k8sObjects(c) as Service[]) if (s.kind === 'Service') s.spec.publishNotReadyAddresses = true;
      },
    ],
    [
      'readiness that notices a full pod after 30 s',
      'checkServices',
      (c) => {
        Object.assign(desktop(c).container.readinessProbe!, { periodSeconds: 10, failureThreshold: 3 });
      },
    ],
    [
      'no preStop drain',
      'checkDrain',
      (c) => {
        delete desktop(c).container.lifecycle;
      },
    ],
    [
      'a drain longer than the grace period',
      'checkDrain',
      (c) => {
        desktop(c).pod.terminationGracePeriodSeconds = 600;
      },
    ],
    [
      'node consolidation may evict a pod',
      'checkDrain',
      (c) => {
        delete desktop(c).set.spec.template.metadata!.annotations!['cluster-autoscaler.kubernetes.io/safe-to-evict'];
      },
    ],
    [
      'a budget of 0 blocks every drain',
      'checkDisruptionBudget',
      (c) => {
        one<PodDisruptionBudget>(c, 'PodDisruptionBudget').spec.maxUnavailable = 0;
      },
    ],
    [
      'lost metrics read as 0 and scale the fleet down',
      'checkAutoscaler',
      (c) => {
        one<ScaledObject>(c, 'ScaledObject').spec.triggers![0]!.metadata!.ignoreNullValues = 'true';
      },
    ],
    [
      'scale-down by 4 pods at once',
      'checkAutoscaler',
      (c) => {
        const down = one<ScaledObject>(c, 'ScaledObject').spec.advanced!.horizontalPodAutoscalerConfig!.behavior!
          .scaleDown!;
        down.policies = [{ type: 'Pods', value: 4, periodSeconds: 60 }];
      },
    ],
    [
      'scaling to zero',
      'checkAutoscaler',
      (c) => {
        one<ScaledObject>(c, 'ScaledObject').spec.minReplicaCount = 0;
      },
    ],
    [
      'the overlay keeps the replica count',
      'checkAutoscaler',
      (c) => {
        for (const f of c.files)
          for (const o of f.docs as Kustomization[]) if (o.kind === 'Kustomization') delete o.patches;
      },
    ],
    [
      'a router Role that reads Secrets',
      'checkRouterRole',
      (c) => {
        k8sObjects(c)
          .find((o) => o.kind === 'Role')!
          .rules!.push({ apiGroups: [''], resources: ['secrets'], verbs: ['get'] });
      },
    ],
    [
      'compose published on every interface',
      'checkCompose',
      (c) => {
        compose(c).service.ports = [`${PORT}:${PORT}`];
      },
    ],
    [
      'compose without the token required',
      'checkCompose',
      (c) => {
        (compose(c).service.environment as Record<string, string>).DESKBATCH_TOKEN = '${DESKBATCH_TOKEN}';
      },
    ],
    [
      "compose stops faster than the daemon's deadline",
      'checkCompose',
      (c) => {
        compose(c).service.stop_grace_period = '10s';
      },
    ],
  ];
  for (const [what, check, mutate] of mutations) {
    const copy = structuredClone(d);
    CHECKS[check]!(copy); // passes before the change
    mutate(copy);
    assert.throws(() => CHECKS[check]!(copy), assert.AssertionError, `${check} catches ${what}`);
  }
});
