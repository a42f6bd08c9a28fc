/**
 * The checks of the deployment files' promises (docs/DEPLOY.md), one function
 * a promise, each failing with an AssertionError when the files break it. The
 * deploy tests run them on the files as they are (test/deploy-k8s.test.ts,
 * test/deploy-compose-prestop.test.ts) and on copies that break each promise
 * (test/deploy-mutations.test.ts), through `CHECKS`: one copy of each check.
 */
import assert from 'node:assert/strict';
import { posix } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG, isLoopback } from '../src/base/config.ts';
import { FLEET_NAMES } from '../src/client/fleet.ts';
import {
  PORT,
  byteSize,
  compose,
  desktop,
  durationMs,
  k8sFiles,
  k8sObjects,
  one,
  quantity,
  shutdownMs,
  subset,
  type Container,
  type Deploy,
  type HttpProbe,
  type K8sObject,
  type Kustomization,
  type Labels,
  type NetworkPolicy,
  type PodDisruptionBudget,
  type ScaledObject,
  type SecurityContext,
  type Service,
} from './deploy-model.ts';

/**
 * The measured cost of one pool desktop on the machine that wrote these files (1280x800 Xvfb, openbox, the
 * desktop worker, headful Chromium with one page; PSS), and of the daemon itself (docs/DEPLOY.md, "Sizing").
 * A pod's memory request must cover at least these.
 */
const DESKTOP_PSS_MIB = 363;
const DAEMON_MIB = 190;

// ---------------------------------------------------------------- the checks

/** Every folder of Kubernetes files has a kustomization that lists each of its manifests; bases it names exist. */
export function checkKustomization(d: Deploy): void {
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

export function checkProbes(d: Deploy): void {
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

export function checkNonRoot(d: Deploy): void {
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
  // With a read-only root, these are the only places anything is written (Xvfb, Chromium; screenshots, downloads).
  const mounts = (container.volumeMounts ?? []).map((m) => m.mountPath);
  for (const path of ['/tmp', d.image.volume]) assert.ok(mounts.includes(path), `${path} is a writable volume`);
}

export function checkShm(d: Deploy): void {
  const { pod, container } = desktop(d);
  const mount = container.volumeMounts?.find((m) => m.mountPath === '/dev/shm');
  assert.ok(mount, '/dev/shm is mounted');
  const volume = pod.volumes?.find((v) => v.name === mount.name);
  assert.equal(volume?.emptyDir?.medium, 'Memory', '/dev/shm is a memory-backed emptyDir');
  assert.ok(quantity(volume?.emptyDir?.sizeLimit, '/dev/shm sizeLimit') >= 2 ** 29, '/dev/shm holds at least 512 MiB');
}

export function checkResources(d: Deploy): void {
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

export function checkShutdown(d: Deploy): void {
  const { pod } = desktop(d);
  const grace = pod.terminationGracePeriodSeconds;
  assert.ok(grace !== undefined, 'terminationGracePeriodSeconds is set');
  assert.ok(grace * 1000 > shutdownMs(d), `grace ${grace} s outlasts the daemon's shutdown (${shutdownMs(d)} ms)`);
}

/**
 * One token per pod: an init container derives it from the fleet key (a Secret volume) and the pod's name and
 * uid, into a memory-backed emptyDir; the daemon reads it through DESKBATCH_TOKEN_FILE and never mounts the key.
 */
export function checkPerPodToken(d: Deploy): void {
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

export function checkSelectors(d: Deploy): void {
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

export function checkNetworkPolicy(d: Deploy): void {
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

export function checkPrometheus(d: Deploy): void {
  const { set } = desktop(d);
  const a = set.spec.template.metadata?.annotations ?? {};
  assert.equal(a['prometheus.io/path'], '/metrics');
  assert.equal(Number(a['prometheus.io/port']), PORT, 'metrics are on the daemon port');
}

export function checkCompose(d: Deploy): void {
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
export function checkPool(d: Deploy): void {
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
export function checkServices(d: Deploy): void {
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

/**
 * What a client places sessions by (DeskbatchClient.connectFleet, src/client/fleet.ts), from DNS alone. Kubernetes'
 * DNS gives a headless Service's pods SRV records `_<port name>._tcp.<service>` only for a named port: both
 * Services name theirs as the client reads them, over TCP, to the daemon's port. The per-pod Service's SRV
 * targets are the pods' own names (`desk-1.desks…`: the StatefulSet sets each pod's hostname and subdomain, which
 * the template leaves alone). And each pod says in /readyz the instance its token is derived from
 * (`--instance $(POD_NAME)/$(POD_UID)`, the init container's `name + '/' + uid`), so the fleet key derives it.
 */
export function checkFleetDns(d: Deploy): void {
  const { set, pod, container } = desktop(d);
  const services = k8sObjects(d).filter((o) => o.kind === 'Service') as Service[];
  assert.equal(
    set.spec.serviceName,
    FLEET_NAMES.pods,
    `the per-pod Service is ${FLEET_NAMES.pods}, as the client reads`,
  );
  for (const name of [FLEET_NAMES.pods, FLEET_NAMES.free]) {
    const service = services.find((s) => s.metadata?.name === name);
    assert.ok(service, `the Service ${name} exists`);
    assert.equal(service.spec.clusterIP, 'None', `${name} is headless: DNS lists its pods`);
    const port = service.spec.ports?.find((p) => p.name === FLEET_NAMES.portName);
    assert.ok(
      port,
      `${name} names its port ${FLEET_NAMES.portName}: SRV records _${FLEET_NAMES.portName}._tcp.${name}`,
    );
    assert.equal(port.protocol ?? 'TCP', 'TCP', `${name}'s port is TCP (_tcp)`);
    const target = port.targetPort ?? port.port;
    const reached = container.ports?.find((p) => p.name === target || p.containerPort === target);
    assert.equal(reached?.containerPort, PORT, `${name}'s port leads to the daemon's (${PORT})`);
  }
  assert.equal(pod.hostname, undefined, "the pods' DNS names are the StatefulSet's: <pod>.<serviceName>");
  assert.equal(pod.subdomain, undefined, "the pods' DNS names are the StatefulSet's: <pod>.<serviceName>");
  const argv = [...(container.command ?? []), ...(container.args ?? [])];
  const i = argv.indexOf('--instance');
  assert.ok(i >= 0, 'the daemon says its instance in /readyz (--instance), from which the fleet key derives its token');
  const m = /^\$\((\w+)\)\/\$\((\w+)\)$/.exec(argv[i + 1] ?? '');
  assert.ok(m, `--instance is $(POD_NAME)/$(POD_UID), got ${argv[i + 1]}`);
  const field = (c: Container, name: string) => c.env?.find((e) => e.name === name)?.valueFrom?.fieldRef?.fieldPath;
  assert.equal(field(container, m[1]!), 'metadata.name', `--instance starts with the pod's name (${m[1]})`);
  assert.equal(field(container, m[2]!), 'metadata.uid', `--instance ends with the pod's uid (${m[2]})`);
  const init = (pod.initContainers ?? []).find((c) =>
    /createHmac/.test([...(c.command ?? []), ...(c.args ?? [])].join('\n')),
  );
  assert.ok(init, 'an init container derives the token');
  assert.match((init.command ?? []).join('\n'), /update\(name \+ '\/' \+ uid\)/, 'it hashes "<name>/<uid>"');
  assert.equal(field(init, 'POD_NAME'), 'metadata.name');
  assert.equal(field(init, 'POD_UID'), 'metadata.uid');
}

/** The drain: a preStop hook that waits on the daemon's leased desktops and waiting sessions, within the grace. */
export function preStopScript(d: Deploy): { command: string[]; script: string } {
  const command = desktop(d).container.lifecycle?.preStop?.exec?.command ?? [];
  assert.equal(command[0], 'node', 'the preStop hook runs node (the image has no curl)');
  return { command, script: command.at(-1) ?? '' };
}

export function checkDrain(d: Deploy): void {
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
export function checkDisruptionBudget(d: Deploy): void {
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
export function checkAutoscaler(d: Deploy): void {
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
export function checkRouterRole(d: Deploy): void {
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

export function checkNoToken(d: Deploy): void {
  for (const f of d.files) assert.deepEqual(tokenLike(f.text), [], `no token-like string in deploy/${f.path}`);
}

export const CHECKS: Record<string, (d: Deploy) => void> = {
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
  checkFleetDns,
  checkDrain,
  checkDisruptionBudget,
  checkAutoscaler,
  checkRouterRole,
};
