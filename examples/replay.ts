/**
 * The example agent without an API key: a local stand-in for the Messages API
 * (testkit/messages-api.ts, on 127.0.0.1) answers with recorded assistant
 * turns, and checks every request the agent sends against the API's rules.
 * The calls in those turns run for real on your daemon: the browser opens a
 * small page served here, the desktop is captured, one call fails on purpose.
 *
 *   npm start -- --allow-private 127.0.0.1:8766   # in another terminal
 *   npm run example:replay          # or: node --import tsx examples/replay.ts [--url URL] [--token TOKEN]
 *
 * The page is served on 127.0.0.1:8766 (DESKBATCH_EXAMPLE_PAGE_PORT changes
 * it; 0 picks a free port). The daemon's browser reaches no loopback or
 * private address unless the operator allows it (docs/SECURITY.md), hence
 * `--allow-private` for exactly this page.
 *
 * Exit status: the agent's (0 when it finished), or 4 when a request broke a
 * rule of the API.
 */
import { pathToFileURL } from 'node:url';
import { realpath } from 'node:fs/promises';
import { EXAMPLE_PAGE, EXAMPLE_TASK, loadTurns, startMessagesApi } from '../testkit/messages-api.ts';
import { startWebServer } from '../testkit/web.ts';
import { main as agentMain } from './agent.ts';

/** Where the example page is served, so the daemon can be told to allow exactly it. */
const DEFAULT_PAGE_PORT = 8766;

/** An agent's command line: its flags and task, its environment; resolves with its exit status. */
export type AgentCommand = (argv: string[], env: NodeJS.ProcessEnv) => Promise<number>;

/**
 * Runs the recorded conversation; `args` are the agent's flags (--url, --token). `agent` is examples/agent.ts
 * unless another is given (examples/replay-python.ts gives the Python one).
 */
export async function replay(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  agent: AgentCommand = agentMain,
): Promise<number> {
  const web = await startWebServer(Number(env.DESKBATCH_EXAMPLE_PAGE_PORT ?? DEFAULT_PAGE_PORT));
  try {
    const { host } = new URL(web.origin);
    console.log(`the example page is at ${web.origin}/report: the daemon's browser needs --allow-private ${host}`);
    web.route('/report', EXAMPLE_PAGE);
    const turns = await loadTurns('example', { PAGE_URL: `${web.origin}/report` });
    const api = await startMessagesApi({ turns });
    try {
      console.log(`replaying ${turns.length} recorded turns from a stand-in Messages API at ${api.baseURL}`);
      const code = await agent([...args, EXAMPLE_TASK], {
        ...env,
        ANTHROPIC_API_KEY: 'replay-no-key',
        ANTHROPIC_BASE_URL: api.baseURL,
      });
      if (api.violations.length) {
        for (const v of api.violations) console.error(`API rule broken: ${v}`);
        return 4;
      }
      console.log(`every request (${api.requests.length}) followed the Messages API's rules`);
      return code;
    } finally {
      await api.close();
    }
  } finally {
    await web.close();
  }
}

if (process.argv[1] && pathToFileURL(await realpath(process.argv[1])).href === import.meta.url) {
  process.exitCode = await replay(process.argv.slice(2));
}
