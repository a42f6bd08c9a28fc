/**
 * An agent that gives Claude a real desktop and browser through a deskbatch
 * daemon: it offers the toolsets the daemon serves, runs each assistant turn's
 * computer and browser calls as one batch, and sends the results back, until
 * Claude stops asking for tools.
 *
 *   node --import tsx examples/agent.ts "Open example.com and tell me its title"
 *
 * Flags: --url, --token, --model, --max-turns, --max-tokens (see `usage`).
 * Environment: ANTHROPIC_API_KEY (required for the real API), ANTHROPIC_BASE_URL
 * (another endpoint, read by the SDK), DESKBATCH_URL, DESKBATCH_TOKEN (else
 * ~/.deskbatch/token), ANTHROPIC_MODEL.
 *
 * It prints one line per turn (calls, failures) and Claude's final text;
 * screenshots stay out of the output (the daemon also saves them to disk).
 */
import { readFile, realpath } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import type {
  BetaContentBlock,
  BetaMessage,
  BetaMessageParam,
  BetaToolResultBlockParam,
  BetaToolUseBlock,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { DeskbatchClient, mergeToolResults, type RunBatchResult } from 'deskbatch/client';

/** A current Claude model that supports `computer_toolset_20260801` and `browser_toolset_20260801`. */
export const DEFAULT_MODEL = 'claude-opus-5-5';
export const DEFAULT_URL = 'ws://127.0.0.1:8765/v1';
export const DEFAULT_MAX_TURNS = 25;
export const DEFAULT_MAX_TOKENS = 4096;

const SYSTEM = [
  'You operate a Linux desktop and a Chromium browser through the computer and browser toolsets.',
  'Prefer the browser toolset for web pages. Several actions in one turn run in order; after a failure,',
  "the rest of that toolset's actions in the turn are skipped, so look at the result before retrying.",
].join(' ');

export interface AgentOptions {
  anthropic: Anthropic;
  /** A connected client; its `welcome` says which toolsets to offer. */
  deskbatch: DeskbatchClient;
  task: string;
  model?: string;
  /** Requests to the Messages API at most (default 25). */
  maxTurns?: number;
  maxTokens?: number;
  system?: string;
  /** One line per turn; default: nothing. */
  log?: (line: string) => void;
  /** Aborting stops the request in flight, or cancels the running batch. */
  signal?: AbortSignal;
}

export interface AgentResult {
  /** The text blocks of the last assistant turn. */
  finalText: string;
  /** Requests sent to the Messages API. */
  turns: number;
  stopReason: BetaMessage['stop_reason'];
  /** True when `maxTurns` ran out while Claude still asked for tools. */
  hitMaxTurns: boolean;
  /** The whole conversation, for inspection. */
  messages: BetaMessageParam[];
}

/**
 * A tool_use this agent cannot run (a custom tool, or a toolset the daemon
 * does not serve) still needs a result: an error, with `toolset_name` echoed
 * for a member call.
 */
function notAvailable(toolUse: BetaToolUseBlock): BetaToolResultBlockParam {
  const what = toolUse.toolset_name
    ? `the '${toolUse.toolset_name}' toolset is not available here`
    : `this agent has no tool named '${toolUse.name}'`;
  return {
    type: 'tool_result',
    tool_use_id: toolUse.id,
    ...(toolUse.toolset_name ? { toolset_name: toolUse.toolset_name } : {}),
    is_error: true,
    content: [{ type: 'text', text: `Error: ${what}.` }],
  };
}

const textOf = (content: readonly BetaContentBlock[]): string =>
  content
    .flatMap((b) => (b.type === 'text' ? [b.text] : []))
    .join('\n')
    .trim();

/** `turn 2: 3 calls (computer 3), 1 failed (mouse_move: ToolInputError), 1 not run, 412 ms` */
function describeTurn(
  turn: number,
  calls: readonly BetaToolUseBlock[],
  run: RunBatchResult | undefined,
  ms: number,
): string {
  const byToolset = new Map<string, number>();
  for (const c of calls) byToolset.set(c.toolset_name ?? '-', (byToolset.get(c.toolset_name ?? '-') ?? 0) + 1);
  const split = [...byToolset].map(([name, n]) => `${name} ${n}`).join(', ');
  const parts = [`turn ${turn}: ${calls.length} call${calls.length === 1 ? '' : 's'}${split ? ` (${split})` : ''}`];
  const failures = run?.result.failures ?? [];
  const failed = failures.map((f) => `${f.name}: ${f.error.type}`).join(', ');
  parts.push(`${failures.length} failed${failed ? ` (${failed})` : ''}`);
  const results = run?.toolResults ?? [];
  const notRun = results.filter((r) => r.is_error && !failures.some((f) => f.tool_use_id === r.tool_use_id)).length;
  if (notRun) parts.push(`${notRun} not run`);
  if (run?.result.cancelled) parts.push('cancelled');
  parts.push(`${Math.round(ms)} ms`);
  return parts.join(', ');
}

/**
 * The agent loop: ask Claude, run the turn's deskbatch calls as one batch,
 * answer every tool_use (results first, in order), repeat until Claude stops
 * asking for tools or `maxTurns` requests were sent.
 */
export async function runAgent(options: AgentOptions): Promise<AgentResult> {
  const { anthropic, deskbatch, task, signal } = options;
  const model = options.model ?? DEFAULT_MODEL;
  const maxTurns = options.maxTurns ?? DEFAULT_MAX_TURNS;
  const log = options.log ?? (() => undefined);
  // `welcome.toolsets[i].tool` is the ready `tools[]` entry: only the members this daemon serves are offered.
  const tools = deskbatch.tools;
  const messages: BetaMessageParam[] = [{ role: 'user', content: task }];
  let response: BetaMessage | undefined;
  let turns = 0;
  while (turns < maxTurns) {
    turns++;
    response = await anthropic.beta.messages.create(
      {
        model,
        max_tokens: options.maxTokens ?? DEFAULT_MAX_TOKENS,
        system: options.system ?? SYSTEM,
        tools,
        messages,
      },
      { signal },
    );
    messages.push({ role: 'assistant', content: response.content });
    const { deskbatch: calls, own } = deskbatch.splitToolUses(response.content);
    if (response.stop_reason !== 'tool_use' || calls.length + own.length === 0) break;
    const started = performance.now();
    const run = calls.length ? await deskbatch.runBatch(calls, { signal }) : undefined;
    log(describeTurn(turns, [...calls, ...own], run, performance.now() - started));
    messages.push({
      role: 'user',
      content: mergeToolResults(response.content, run?.toolResults ?? [], own.map(notAvailable)),
    });
    if (run?.result.cancelled) break;
  }
  const stopReason = response?.stop_reason ?? null;
  return {
    finalText: response ? textOf(response.content) : '',
    turns,
    stopReason,
    hitMaxTurns: stopReason === 'tool_use' && turns >= maxTurns,
    messages,
  };
}

// ---------------------------------------------------------------- command line

const usage = `usage: node --import tsx examples/agent.ts [options] "task"

  --url URL          deskbatch daemon (default: $DESKBATCH_URL or ${DEFAULT_URL})
  --token TOKEN      its token (default: $DESKBATCH_TOKEN or ~/.deskbatch/token)
  --model MODEL      Claude model (default: $ANTHROPIC_MODEL or ${DEFAULT_MODEL})
  --max-turns N      requests to the Messages API at most (default ${DEFAULT_MAX_TURNS})
  --max-tokens N     max_tokens per request (default ${DEFAULT_MAX_TOKENS})

ANTHROPIC_API_KEY must be set (ANTHROPIC_BASE_URL points the SDK elsewhere).
Exit status: 0 finished, 1 error, 2 usage, 3 max turns reached.`;

async function readToken(): Promise<string | undefined> {
  try {
    return (await readFile(join(homedir(), '.deskbatch', 'token'), 'utf8')).trim() || undefined;
  } catch {
    return undefined;
  }
}

function positiveInt(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${name} must be a positive whole number`);
  return n;
}

class UsageError extends Error {}

export async function main(argv: string[] = process.argv.slice(2), env = process.env): Promise<number> {
  let flags;
  try {
    flags = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        url: { type: 'string' },
        token: { type: 'string' },
        model: { type: 'string' },
        'max-turns': { type: 'string' },
        'max-tokens': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  const { values, positionals } = flags;
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const task = positionals.join(' ').trim();
  if (!task) {
    console.error(`no task given\n\n${usage}`);
    return 2;
  }
  const apiKey = env.ANTHROPIC_API_KEY;
  const baseURL = env.ANTHROPIC_BASE_URL;
  if (!apiKey && !baseURL) {
    console.error(
      'ANTHROPIC_API_KEY is not set: set it to run against the Claude API ' +
        '(or set ANTHROPIC_BASE_URL to point the SDK at another endpoint).',
    );
    return 2;
  }
  let maxTurns: number;
  let maxTokens: number;
  try {
    maxTurns = positiveInt(values['max-turns'], '--max-turns', DEFAULT_MAX_TURNS);
    maxTokens = positiveInt(values['max-tokens'], '--max-tokens', DEFAULT_MAX_TOKENS);
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  const url = values.url ?? env.DESKBATCH_URL ?? DEFAULT_URL;
  const token = values.token ?? env.DESKBATCH_TOKEN ?? (await readToken());
  if (!token) {
    console.error(
      'no deskbatch token: pass --token, set DESKBATCH_TOKEN, or run the daemon once to create ~/.deskbatch/token',
    );
    return 2;
  }
  const model = values.model ?? env.ANTHROPIC_MODEL ?? DEFAULT_MODEL;
  // Without a key, a stand-in at ANTHROPIC_BASE_URL still gets a well-formed request.
  const anthropic = new Anthropic({ apiKey: apiKey ?? 'no-key', baseURL });

  const abort = new AbortController();
  const onSignal = (): void => abort.abort(new Error('interrupted'));
  process.once('SIGINT', onSignal);
  let deskbatch: DeskbatchClient | undefined;
  try {
    deskbatch = await DeskbatchClient.connect(url, {
      token,
      clientName: 'deskbatch-example-agent/1',
      signal: abort.signal,
    });
    const offered = deskbatch.toolsets.map((t) => `${t.toolset_name} (${t.members.length} members)`).join(', ');
    console.log(`deskbatch ${url}: session ${deskbatch.sessionId}, offering ${offered}; model ${model}`);
    const result = await runAgent({
      anthropic,
      deskbatch,
      task,
      model,
      maxTurns,
      maxTokens,
      log: (line) => console.log(line),
      signal: abort.signal,
    });
    console.log(
      `final (${result.stopReason ?? 'no reply'} after ${result.turns} turns): ${result.finalText || '(no text)'}`,
    );
    if (result.hitMaxTurns) {
      console.error(`stopped after --max-turns ${maxTurns} with Claude still asking for tools`);
      return 3;
    }
    return 0;
  } catch (err) {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  } finally {
    process.off('SIGINT', onSignal);
    await deskbatch?.close();
  }
}

/** Run as a script (not when imported): `node --import tsx examples/agent.ts "task"`. */
async function isMain(): Promise<boolean> {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return pathToFileURL(await realpath(script)).href === import.meta.url;
  } catch {
    return false;
  }
}

if (await isMain()) process.exitCode = await main();
