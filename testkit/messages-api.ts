/**
 * A local stand-in for the Messages API (`POST /v1/messages`) on 127.0.0.1,
 * port 0. It replays recorded assistant turns (test/fixtures/agent/*.json,
 * written by hand in the API's own shape) one per request, and checks every
 * request it receives against the API's rules (helpers/api-rules.ts):
 * a request that breaks one is answered as the API would, with a 400
 * `invalid_request_error`, and recorded in `violations`, so a test that sent
 * it fails. It also checks that the agent sends each recorded assistant turn
 * back unchanged, in order.
 *
 * Message threads (`thread: { type: 'continue' }`, which the SDK's tool runner
 * sends) are followed: the rules apply to the whole conversation.
 *
 * Point the SDK at it with `new Anthropic({ baseURL: api.baseURL, apiKey })`
 * or `ANTHROPIC_BASE_URL`. It stops itself once the last turn is served (a
 * later request then finds nothing listening), and `close()` stops it early.
 */
import { readFile, readdir } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { ApiRuleError, assertMessagesRequestValid } from './api-rules.ts';

export const AGENT_FIXTURES = new URL('../test/fixtures/agent/', import.meta.url);

/** The page and task the `example-*` fixtures were recorded against (the test and examples/replay.ts). */
export const EXAMPLE_PAGE_TITLE = 'Deskbatch test page';
export const EXAMPLE_PAGE = `<!doctype html><title>${EXAMPLE_PAGE_TITLE}</title><main><h1>Pelican report</h1><p>The secret word is pelican.</p></main>`;
export const EXAMPLE_TASK = 'Open the test page and tell me its secret word.';

/** One request the stand-in received, with what it answered. */
export interface ApiRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  /** The parsed JSON body (undefined when it was not JSON). */
  body: unknown;
  status: number;
  /** The rule the request broke, when it broke one. */
  violation?: string;
}

export interface MessagesApi {
  /** `http://127.0.0.1:PORT`, for `baseURL` / `ANTHROPIC_BASE_URL`. */
  baseURL: string;
  requests: ApiRequest[];
  /** Every broken rule, in order (empty when every request was valid). */
  violations: string[];
  /** Turns served so far. */
  readonly served: number;
  close(): Promise<void>;
}

export interface MessagesApiOptions {
  /** The assistant turns to answer with, in order. */
  turns: readonly BetaMessage[];
  /** When set, requests must present it (`x-api-key` or `Authorization: Bearer`). */
  apiKey?: string;
  /** Stop listening once the last turn is served. Default true. */
  stopAfterLastTurn?: boolean;
}

/**
 * The fixtures whose names start with `${prefix}-`, in name order, with every
 * `{{NAME}}` inside a string replaced by `vars.NAME` (after parsing, so no
 * value can break the JSON).
 */
export async function loadTurns(prefix: string, vars: Record<string, string> = {}): Promise<BetaMessage[]> {
  const names = (await readdir(AGENT_FIXTURES)).filter((n) => n.startsWith(`${prefix}-`) && n.endsWith('.json'));
  if (names.length === 0) throw new Error(`no fixtures ${prefix}-*.json in ${AGENT_FIXTURES.pathname}`);
  const fill = (value: unknown): unknown => {
    if (typeof value === 'string') {
      return value.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
        const v = vars[name];
        if (v === undefined) throw new Error(`fixture ${prefix}: no value for {{${name}}}`);
        return v;
      });
    }
    if (Array.isArray(value)) return value.map(fill);
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v)]));
    }
    return value;
  };
  const turns: BetaMessage[] = [];
  for (const name of names.sort()) {
    turns.push(fill(JSON.parse(await readFile(new URL(name, AGENT_FIXTURES), 'utf8'))) as BetaMessage);
  }
  return turns;
}

/**
 * What the request's history must hold before turn `served` is answered: the
 * first user message, then each earlier recorded assistant turn exactly as it
 * was sent, each followed by the user turn that answers it.
 */
type Message = { role: string; content: unknown };

function checkHistory(messages: Message[], turns: readonly BetaMessage[], served: number): void {
  if (messages.length !== 2 * served + 1) {
    throw new ApiRuleError(
      `stand-in: request ${served + 1} should carry ${2 * served + 1} messages (the task, then each earlier ` +
        `assistant turn and its answer), not ${messages.length}`,
    );
  }
  for (let j = 0; j < served; j++) {
    const sent = messages[2 * j + 1]!;
    if (sent.role !== 'assistant' || !isDeepStrictEqual(sent.content, turns[j]!.content)) {
      throw new ApiRuleError(`stand-in: messages.${2 * j + 1} is not assistant turn ${j + 1} sent back unchanged`);
    }
  }
  if (messages[messages.length - 1]!.role !== 'user')
    throw new ApiRuleError('stand-in: the last message is a user turn');
}

function authorized(req: IncomingMessage, apiKey: string | undefined): boolean {
  if (apiKey === undefined) return true;
  return req.headers['x-api-key'] === apiKey || req.headers.authorization === `Bearer ${apiKey}`;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res
    .writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
      'request-id': `req_standin_${Date.now().toString(36)}`,
    })
    .end(text);
}

const apiError = (type: string, message: string) => ({ type: 'error', error: { type, message } });

export async function startMessagesApi(options: MessagesApiOptions): Promise<MessagesApi> {
  const { turns, apiKey, stopAfterLastTurn = true } = options;
  const requests: ApiRequest[] = [];
  const violations: string[] = [];
  let served = 0;
  let closing: Promise<void> | undefined;
  /** The whole conversation up to each turn served, by its message id, for `thread: { type: 'continue' }`. */
  const threads = new Map<string, unknown[]>();

  /**
   * The request's whole conversation. The SDK's tool runner uses message
   * threads: after `thread: { type: 'create' }` it sends only the new messages
   * with `thread: { type: 'continue', previous_message_id }`.
   */
  const fullHistory = (body: unknown): unknown[] => {
    const { thread, messages } = body as {
      thread?: { type?: string; previous_message_id?: string };
      messages?: unknown;
    };
    if (!Array.isArray(messages)) throw new ApiRuleError('messages: required');
    if (thread?.type !== 'continue') return messages;
    const earlier = threads.get(String(thread.previous_message_id));
    if (!earlier) throw new ApiRuleError(`thread: no message ${String(thread.previous_message_id)} to continue from`);
    return [...earlier, ...messages];
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const record: ApiRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: undefined,
        status: 0,
      };
      requests.push(record);
      const answer = (status: number, body: unknown, violation?: string): void => {
        record.status = status;
        if (violation !== undefined) {
          record.violation = violation;
          violations.push(violation);
        }
        send(res, status, body);
      };
      if (req.method !== 'POST' || new URL(record.path, 'http://x').pathname !== '/v1/messages') {
        answer(
          404,
          apiError('not_found_error', `stand-in: no ${req.method} ${record.path}`),
          `unexpected ${req.method} ${record.path}`,
        );
        return;
      }
      if (!authorized(req, apiKey)) {
        answer(401, apiError('authentication_error', 'invalid x-api-key'), 'the request did not carry the API key');
        return;
      }
      try {
        record.body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        answer(400, apiError('invalid_request_error', 'the body is not JSON'), 'the body is not JSON');
        return;
      }
      let history: unknown[];
      try {
        history = fullHistory(record.body);
        assertMessagesRequestValid({ ...(record.body as object), messages: history }, req.headers);
        if (served >= turns.length) throw new ApiRuleError(`stand-in: no recorded turn left (served ${served})`);
        checkHistory(history as Message[], turns, served);
      } catch (err) {
        if (err instanceof ApiRuleError) answer(400, apiError('invalid_request_error', err.message), err.message);
        else answer(500, apiError('api_error', 'stand-in failure'), `the stand-in failed: ${String(err)}`);
        return;
      }
      const turn = turns[served++]!;
      threads.set(turn.id, [...history, { role: 'assistant', content: turn.content }]);
      if (served === turns.length && stopAfterLastTurn) res.once('finish', () => void close());
      answer(200, turn);
    });
  });
  server.unref();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  function close(): Promise<void> {
    closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      // The last answer is written; the connections it left open are idle (or will be at once).
      setImmediate(() => server.closeAllConnections());
    });
    return closing;
  }

  return {
    baseURL: `http://127.0.0.1:${port}`,
    requests,
    violations,
    get served() {
      return served;
    },
    close,
  };
}
