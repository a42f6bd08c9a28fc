/**
 * The operations endpoints of a daemon (docs/OPERATIONS.md): `GET /metrics`
 * (bearer token) and `GET /readyz` (no token). `/healthz` is the server's own.
 */
import type { ActivityHub } from '../base/activity.ts';
import type { Executor } from '../executor/executor.ts';
import type { HttpRoute, ServerStatus } from '../server/server.ts';
import { createReadiness, type Containment } from './health.ts';
import type { Desktops } from '../desktop-pool/pool.ts';
import { createMetrics, type LiveCounts, type Metrics } from './metrics.ts';

export interface OpsDeps {
  activity: ActivityHub;
  executor: Pick<Executor, 'served' | 'plainTool'>;
  desktops: Desktops;
  /** The server's status(); read lazily, so the server may be built after the routes. */
  status: () => ServerStatus;
  containment: () => Containment;
  /** The daemon's `--instance`, said in /readyz. */
  instance?: string;
  /** The recordings on disk, when recording is on. */
  recordings?: () => { recordings: number; live: number; bytes: number };
  /** The sessions' staged files held now. */
  files?: () => { bytes: number; files: number };
  /** The live views and links (metrics.ts LiveCounts). */
  live?: () => LiveCounts;
}

export interface Ops {
  metrics: Metrics;
  routes: HttpRoute[];
}

export function createOps(deps: OpsDeps): Ops {
  const metrics = createMetrics({
    activity: deps.activity,
    served: deps.executor.served,
    ...(deps.executor.plainTool ? { plainToolName: deps.executor.plainTool.toolName } : {}),
    status: deps.status,
    desktops: deps.desktops,
    ...(deps.recordings ? { recordings: deps.recordings } : {}),
    sandbox: () => deps.containment().desktop_sandbox,
    ...(deps.files ? { files: deps.files } : {}),
    ...(deps.live ? { live: deps.live } : {}),
  });
  const readiness = createReadiness({
    status: deps.status,
    desktops: deps.desktops,
    containment: deps.containment,
    ...(deps.instance !== undefined ? { instance: deps.instance } : {}),
  });
  return { metrics, routes: [metrics.route, readiness.route] };
}
