/**
 * The deployment files under deploy/, read as data for the deploy tests
 * (test/deploy-*.test.ts): every YAML file parsed, with what the image
 * (Dockerfile) and src/cli.ts promise beside them; typed views of the few
 * fields the checks read; and the units those fields are written in
 * (Kubernetes quantities, Compose byte sizes and durations).
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { DEFAULT_CONFIG } from '../src/base/config.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
export const PORT = DEFAULT_CONFIG.port;

// ---------------------------------------------------------------- the model

export interface YamlFile {
  /** Relative to deploy/, with forward slashes. */
  path: string;
  text: string;
  docs: unknown[];
}

/** What the image promises, read from the Dockerfile. */
export interface Image {
  uid: number;
  volume: string;
}

export interface Deploy {
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

export async function load(): Promise<Deploy> {
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

export interface HttpProbe {
  httpGet?: { path?: string; port?: number | string };
  periodSeconds?: number;
  timeoutSeconds?: number;
  failureThreshold?: number;
  successThreshold?: number;
}
export interface SecurityContext {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  runAsGroup?: number;
  allowPrivilegeEscalation?: boolean;
  readOnlyRootFilesystem?: boolean;
  privileged?: boolean;
  capabilities?: { drop?: string[]; add?: string[] };
  seccompProfile?: { type?: string };
}
export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name?: string; key?: string }; fieldRef?: { fieldPath?: string } };
}
export interface Container {
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
export interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  securityContext?: SecurityContext & { fsGroup?: number };
  automountServiceAccountToken?: boolean;
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  terminationGracePeriodSeconds?: number;
  hostname?: string;
  subdomain?: string;
  volumes?: {
    name: string;
    emptyDir?: { medium?: string; sizeLimit?: string };
    secret?: { secretName?: string; defaultMode?: number };
  }[];
}
export type Labels = Record<string, string>;
export interface K8sObject {
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
export interface StatefulSet extends K8sObject {
  spec: {
    serviceName?: string;
    replicas?: number;
    updateStrategy?: { type?: string };
    selector?: { matchLabels?: Labels };
    template: { metadata?: { labels?: Labels; annotations?: Record<string, string> }; spec: PodSpec };
  };
}
export interface NetworkPeer {
  namespaceSelector?: unknown;
  podSelector?: unknown;
  ipBlock?: { cidr: string; except?: string[] };
}
export interface NetworkPolicy extends K8sObject {
  spec: {
    podSelector?: { matchLabels?: Labels };
    policyTypes?: string[];
    ingress?: { from?: NetworkPeer[]; ports?: { port?: number | string }[] }[];
    egress?: { to?: NetworkPeer[]; ports?: { port?: number | string }[] }[];
  };
}
export interface Service extends K8sObject {
  spec: {
    clusterIP?: string;
    publishNotReadyAddresses?: boolean;
    selector?: Labels;
    ports?: { name?: string; port: number; targetPort?: number | string; protocol?: string }[];
  };
}
export interface PodDisruptionBudget extends K8sObject {
  spec: {
    maxUnavailable?: number | string;
    minAvailable?: number | string;
    unhealthyPodEvictionPolicy?: string;
    selector?: { matchLabels?: Labels };
  };
}
export interface HpaPolicy {
  type?: string;
  value?: number;
  periodSeconds?: number;
}
export interface ScaledObject extends K8sObject {
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
export interface Kustomization extends K8sObject {
  namespace?: string;
  resources?: string[];
  patches?: { target?: { group?: string; kind?: string; name?: string }; patch?: string }[];
}
export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
}
export interface ComposeService {
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
export interface Compose {
  services?: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

/** The Kubernetes files: the fleet (deploy/k8s) and its optional autoscaler overlay (deploy/k8s-autoscale). */
export const k8sFiles = (d: Deploy) => d.files.filter((f) => /^k8s(-[a-z]+)?\//.test(f.path));
export const k8sObjects = (d: Deploy) => k8sFiles(d).flatMap((f) => f.docs as K8sObject[]);

export function one<T extends K8sObject = K8sObject>(d: Deploy, kind: string): T {
  const found = k8sObjects(d).filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind} under deploy/k8s`);
  return found[0] as T;
}

export function compose(d: Deploy): { file: Compose; service: ComposeService } {
  const f = d.files.find((x) => x.path === 'compose.yaml');
  assert.ok(f, 'deploy/compose.yaml exists');
  const file = f.docs[0] as Compose;
  const services = Object.values(file.services ?? {});
  assert.equal(services.length, 1, 'compose.yaml runs one desktop service');
  return { file, service: services[0]! };
}

export function desktop(d: Deploy): { set: StatefulSet; pod: PodSpec; container: Container } {
  const set = one<StatefulSet>(d, 'StatefulSet');
  const pod = set.spec.template.spec;
  assert.equal(pod.containers.length, 1, 'one container per desktop pod');
  return { set, pod, container: pod.containers[0]! };
}

// ---------------------------------------------------------------- units

/** Kubernetes quantities: 500m, 2, 1Gi, 512Mi, 1G … in base units. */
export function quantity(v: string | number | undefined, what: string): number {
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
export function byteSize(v: string | number | undefined, what: string): number {
  assert.ok(v !== undefined, `${what} is set`);
  const m = /^(\d+(?:\.\d+)?)\s*(b|k|kb|m|mb|g|gb)?$/i.exec(String(v));
  assert.ok(m, `${what} is a byte size: ${v}`);
  const power = { b: 0, k: 1, m: 2, g: 3 }[(m[2] ?? 'b')[0]!.toLowerCase() as 'b' | 'k' | 'm' | 'g'];
  return Number(m[1]) * 1024 ** power;
}

/** Compose durations: 30s, 1m30s, 1500ms. */
export function durationMs(v: string | undefined, what: string): number {
  assert.ok(v !== undefined && /^(\d+(\.\d+)?(ms|s|m|h))+$/.test(v), `${what} is a duration: ${v}`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
  let total = 0;
  for (const [, n, u] of v.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) total += Number(n) * unit[u as keyof typeof unit];
  return total;
}

export const subset = (sel: Labels | undefined, labels: Labels | undefined) =>
  sel !== undefined && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels?.[k] === v);

/** The longest the daemon can take from SIGTERM to exit. */
export const shutdownMs = (d: Deploy) => DEFAULT_CONFIG.shutdownDeadlineMs + d.hardExitMarginMs;
