/**
 * Recordings over HTTP, behind the token (docs/RECORDING.md "Reading them"):
 *
 * - `GET /recordings`: every recording, newest first (RecordingInfo).
 * - `GET /recordings/<id>/<file>`: one of its files (`trajectory.jsonl`,
 *   `video.mp4`, `video.vtt`, `trace.zip`, `summary.json`, `images/<name>`);
 *   `?download=1` asks the browser to save it.
 *
 * Files are named by the store's fixed list only (RecordingStore.resolve),
 * served with their own content type, `nosniff` and a sandboxing CSP, so a
 * text a page or the model wrote is never run as a page of this origin.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpRoute } from '../server/server.ts';
import type { RecordingStore, RecordingSummary } from './store.ts';

export const RECORDINGS_PATH = '/recordings';

const HEADERS = {
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; sandbox",
  'cross-origin-resource-policy': 'same-origin',
  'referrer-policy': 'no-referrer',
};

function notFound(res: ServerResponse): void {
  res.writeHead(404, { 'content-type': 'text/plain', ...HEADERS }).end('not found\n');
}

export function recordingRoutes(
  store: RecordingStore,
  live: (id: string) => RecordingSummary | undefined,
): HttpRoute[] {
  return [
    {
      method: 'GET',
      path: RECORDINGS_PATH,
      auth: 'token',
      async handle(_req, res) {
        const recordings = await store.list(live);
        res.writeHead(200, { 'content-type': 'application/json', ...HEADERS }).end(JSON.stringify({ recordings }));
      },
    },
    {
      method: 'GET',
      path: RECORDINGS_PATH,
      prefix: true,
      auth: 'token',
      handle: (req, res) => serveFile(store, req, res),
    },
  ];
}

async function serveFile(store: RecordingStore, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://local');
  let rest: string;
  try {
    rest = decodeURIComponent(url.pathname.slice(RECORDINGS_PATH.length + 1));
  } catch {
    return notFound(res);
  }
  const slash = rest.indexOf('/');
  if (slash <= 0) return notFound(res);
  const id = rest.slice(0, slash);
  const name = rest.slice(slash + 1);
  const file = store.resolve(id, name);
  if (!file) return notFound(res);
  let opened: Awaited<ReturnType<RecordingStore['read']>>;
  try {
    opened = await store.read(file.path);
  } catch {
    return notFound(res);
  }
  const download = url.searchParams.get('download') === '1';
  res.writeHead(200, {
    'content-type': file.type,
    'content-length': String(opened.size),
    ...HEADERS,
    ...(download ? { 'content-disposition': `attachment; filename="${id}-${name.replace('/', '-')}"` } : {}),
  });
  if (req.method === 'HEAD') {
    (opened.stream as unknown as { destroy(): void }).destroy();
    res.end();
    return;
  }
  opened.stream.pipe(res);
}
