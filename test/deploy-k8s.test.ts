/**
 * The Kubernetes files' promises (docs/DEPLOY.md), read as data: every YAML
 * file under deploy/ parses; the Kubernetes desktops probe /healthz and
 * /readyz on the daemon's port, run as the image's non-root uid with a
 * read-only root, no capabilities and memory for /dev/shm, have resources,
 * outlive the daemon's shutdown deadline, each derive a token of their own from
 * the fleet key in an init container (the daemon's container never mounts the
 * key) and are reachable only from the orchestrator's namespace; no token is
 * written anywhere; every kustomization lists every manifest of its folder.
 *
 * Each pod is a pool of desktops (`--desktops N --warm M`, no DISPLAY), with
 * requests sized from the measured cost of a desktop; it leaves the routing
 * Service when full (readiness) but keeps its per-pod name (resume); its
 * preStop hook waits for its leased desktops within the grace period; the
 * PodDisruptionBudget lets drains go one pod at a time; the optional KEDA
 * autoscaler (deploy/k8s-autoscale) scales the StatefulSet on leased and
 * waiting desktops, scales down slowly and owns the replica count; the
 * router's Role only reads. Both Services name their port, so Kubernetes' DNS
 * gives the SRV records DeskbatchClient.connectFleet places sessions by, and
 * each pod says in /readyz the instance its token is derived from.
 *
 * There is no cluster on the machine these tests run on: these checks are all
 * the validation the files get here. The checks live in testkit/deploy-checks.ts;
 * test/deploy-mutations.test.ts shows that each fails on a copy that breaks its
 * promise, and test/deploy-compose-prestop.test.ts runs the preStop hook.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkAutoscaler,
  checkDisruptionBudget,
  checkDrain,
  checkFleetDns,
  checkKustomization,
  checkNetworkPolicy,
  checkNoToken,
  checkNonRoot,
  checkPerPodToken,
  checkPool,
  checkProbes,
  checkPrometheus,
  checkResources,
  checkRouterRole,
  checkSelectors,
  checkServices,
  checkShm,
  checkShutdown,
} from '../testkit/deploy-checks.ts';
import { k8sFiles, k8sObjects, load } from '../testkit/deploy-model.ts';

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

test('the DNS a client places sessions by: SRV records of both Services, pod names, and each pod says its instance', async () => {
  checkFleetDns(await load());
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
