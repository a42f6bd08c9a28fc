/**
 * Each check of the deployment files (testkit/deploy-checks.ts, run on the
 * files as they are by test/deploy-k8s.test.ts and
 * test/deploy-compose-prestop.test.ts) fails on a copy that breaks its
 * promise: the copy passes the check first, then one change breaks one
 * promise (a manifest left out of a kustomization, a probe on the wrong path,
 * root, a literal or fleet-wide token, open ingress or egress, a pool without
 * --desktops, a drain longer than the grace period, an autoscaler that scales
 * to zero, a router Role that reads Secrets, Compose on every interface…) and
 * the check must throw. Without this, a check that passes everything would
 * look the same as one that holds.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import { CHECKS } from '../testkit/deploy-checks.ts';
import {
  PORT,
  compose,
  desktop,
  k8sObjects,
  load,
  one,
  type Deploy,
  type Kustomization,
  type NetworkPolicy,
  type PodDisruptionBudget,
  type ScaledObject,
  type Service,
} from '../testkit/deploy-model.ts';

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
      'desks-free with an unnamed port: no SRV records',
      'checkFleetDns',
      (c) => {
        for (const s of k8sObjects(c) as Service[])
          if (s.metadata?.name === 'desks-free') delete s.spec.ports![0]!.name;
      },
    ],
    [
      'a port name the client does not read',
      'checkFleetDns',
      (c) => {
        for (const s of k8sObjects(c) as Service[]) if (s.kind === 'Service') s.spec.ports![0]!.name = 'http';
      },
    ],
    [
      'no --instance: the fleet key cannot derive a pod token',
      'checkFleetDns',
      (c) => {
        const { container } = desktop(c);
        const i = container.args!.indexOf('--instance');
        container.args!.splice(i, 2);
      },
    ],
    [
      '--instance without the uid',
      'checkFleetDns',
      (c) => {
        const { container } = desktop(c);
        container.args![container.args!.indexOf('--instance') + 1] = '$(POD_NAME)/$(POD_NAME)';
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
