/**
 * Running the Python client's programs (clients/python): its pytest suite in
 * test/python-client.test.ts and its example agent in examples/replay-python.ts.
 *
 * They run on Debian's interpreter, /usr/bin/python3, which has the packages
 * scripts/test-packages.txt lists (python3-websockets, python3-pytest):
 * the `python3` first on PATH may be another one (a pyenv shim) without them.
 * DESKBATCH_PYTHON names another interpreter. The user's site-packages are
 * left out and no bytecode is written into the checkout.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const PYTHON = process.env.DESKBATCH_PYTHON || '/usr/bin/python3';
/** The repository's root, where the Python programs are run from. */
export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface PythonRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Empty when the output was inherited. */
  stdout: string;
  stderr: string;
  ms: number;
}

export interface PythonOptions {
  /** Added to this process's environment. */
  env?: NodeJS.ProcessEnv;
  /** The child is killed (SIGKILL) after this long. */
  timeoutMs: number;
  /** Let the child write to this process's stdout and stderr instead of collecting them. */
  inheritOutput?: boolean;
}

/** Runs `PYTHON args…` in the repository's root; resolves when it exited (or was killed at the deadline). */
export function runPython(args: readonly string[], options: PythonOptions): Promise<PythonRun> {
  const started = performance.now();
  const child = spawn(PYTHON, args, {
    cwd: REPO_ROOT,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', PYTHONNOUSERSITE: '1', ...options.env },
    stdio: options.inheritOutput ? ['ignore', 'inherit', 'inherit'] : ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
  return new Promise((resolve, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`could not run ${PYTHON}: ${err.message} (bash scripts/setup.sh scripts/test-packages.txt)`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - started });
    });
  });
}
