/**
 * The Python example agent (clients/python/examples/agent.py) without an API
 * key, as examples/replay.ts runs the TypeScript one: a local stand-in for the
 * Messages API (testkit/messages-api.ts) answers with the same recorded turns
 * and checks every request the Python agent sends against the API's rules; the
 * calls in those turns run for real on your daemon.
 *
 *   npm start -- --allow-private 127.0.0.1:8766   # in another terminal
 *   npm run example:python          # or: node --import tsx examples/replay-python.ts [--url URL] [--token TOKEN]
 *
 * The agent runs on Debian's /usr/bin/python3 (python3-websockets; DESKBATCH_PYTHON names another interpreter),
 * with the anthropic package when that interpreter has it, else plain HTTP. Exit status as for replay.ts.
 */
import { pathToFileURL } from 'node:url';
import { realpath } from 'node:fs/promises';
import { runPython } from '../testkit/python.ts';
import { replay } from './replay.ts';

const AGENT = 'clients/python/examples/agent.py';
/** A recorded conversation takes seconds; this only bounds a hung agent. */
const AGENT_DEADLINE_MS = 10 * 60_000;

export async function replayPython(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return replay(args, env, async (argv, agentEnv) => {
    const run = await runPython([AGENT, ...argv], {
      env: agentEnv,
      timeoutMs: AGENT_DEADLINE_MS,
      inheritOutput: true,
    });
    if (run.signal) console.error(`the Python agent was stopped by ${run.signal}`);
    return run.code ?? 1;
  });
}

if (process.argv[1] && pathToFileURL(await realpath(process.argv[1])).href === import.meta.url) {
  process.exitCode = await replayPython(process.argv.slice(2));
}
