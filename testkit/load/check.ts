/**
 * The load's one checker: for every batch, the API rules, one result per tool_use, the
 * failures, the events and what each succeeded call returned, against what this session
 * and this batch did (module comment of testkit/load.ts: lost, duplicated, crossed).
 * It never throws: it counts into the run and describes the first problems.
 */
import type { BatchResult, ToolUse, Welcome } from '../../src/base/protocol.ts';
import { assertApiValid } from '../api-rules.ts';
import type { LoadClient } from './client.ts';
import type { LoadRun, Planned } from './run.ts';

const textOf = (r: BatchResult['tool_results'][number] | undefined): string =>
  (r?.content ?? [])
    .filter((b) => b.type === 'text')
    .map((b) => (b.type === 'text' ? b.text : ''))
    .join('\n');

/** The API rules, one result per tool_use, the failures, and the content. */
export function judge(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  welcome: Welcome,
  batchId: string,
  plan: Planned,
  r: BatchResult,
) {
  const { stats, problem, expectFailure } = run;
  const ids = new Set(plan.toolUses.map((tu) => tu.id));
  const seen = new Map<string, number>();
  for (const res of r.tool_results) {
    if (!ids.has(res.tool_use_id)) {
      stats.crossed++;
      problem(`${tag} ${batchId}: a result for a foreign tool_use ${res.tool_use_id}`);
    }
    seen.set(res.tool_use_id, (seen.get(res.tool_use_id) ?? 0) + 1);
  }
  for (const tu of plan.toolUses) {
    const n = seen.get(tu.id) ?? 0;
    if (n === 0) {
      stats.lost++;
      problem(`${tag} ${batchId}: no result for ${tu.id}`);
    } else {
      stats.results++;
      if (n > 1) {
        stats.duplicated += n - 1;
        problem(`${tag} ${batchId}: ${n} results for ${tu.id}`);
      }
    }
  }
  try {
    assertApiValid(plan.toolUses, r);
  } catch (err) {
    stats.crossed++;
    problem(`${tag} ${batchId}: API rules: ${String(err).slice(0, 400)}`);
  }
  for (const f of r.failures) {
    const planned = plan.expect[f.index];
    if (planned?.kind === 'error' && planned.type === f.error.type) continue; // the malformed input's refusal
    if (expectFailure(f.error)) {
      stats.expectedFailures[f.error.type] = (stats.expectedFailures[f.error.type] ?? 0) + 1;
      continue;
    }
    stats.unexpectedFailures++;
    problem(`${tag} ${batchId}: unexpected failure of ${f.name}: ${f.error.type}: ${f.error.message.slice(0, 200)}`);
  }
  checkContent(run, tag, welcome.session_id, batchId, plan, r, welcome);
}

/** Checks one batch's events: one terminal phase per call, in order, before the result, none foreign. */
export function checkEvents(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  batchId: string,
  toolUses: ToolUse[],
  r: BatchResult,
): void {
  const { stats, problem, callDurations } = run;
  const events = client.events.get(batchId) ?? [];
  const phases = toolUses.map(() => [] as string[]);
  let bad = '';
  for (const { event, late } of events) {
    const tu = toolUses[event.index];
    if (!tu || tu.id !== event.tool_use_id) {
      stats.crossed++;
      bad ||= `event for a foreign call ${event.tool_use_id}@${event.index}`;
      continue;
    }
    if (late) bad ||= `event ${event.phase} of ${tu.id} after the batch_result`;
    phases[event.index]!.push(event.phase);
    if (event.phase === 'succeeded' && event.duration_ms !== undefined) {
      const key = `${event.toolset_name}.${event.name}`;
      callDurations.set(key, [...(callDurations.get(key) ?? []), event.duration_ms]);
    }
  }
  phases.forEach((p, i) => {
    const seq = p.join(',');
    const result = r.tool_results[i];
    const okSeq = ['started,succeeded', 'started,failed', 'not_executed', 'cancelled', 'started,cancelled'];
    if (!okSeq.includes(seq)) bad ||= `call ${i} has events [${seq}]`;
    else if (seq.endsWith('succeeded') && result?.is_error) bad ||= `call ${i}: succeeded event, error result`;
    else if (seq.endsWith('failed') && !r.failures.some((f) => f.index === i)) bad ||= `call ${i}: failed, no failure`;
  });
  if (bad) {
    stats.eventProblems++;
    problem(`${tag} ${batchId}: ${bad}`);
  }
}

/** Checks what succeeded calls returned against what the batch did; returns whether anything was crossed. */
export function checkContent(
  run: LoadRun,
  tag: string,
  sessionId: string,
  batchId: string,
  plan: Planned,
  r: BatchResult,
  welcome: Welcome,
): void {
  const { stats, problem, opts, expectFailure } = run;
  const halt = new Map(welcome.toolsets.map((t) => [t.toolset_name, t.not_executed_text]));
  const cancelledText = new Map(welcome.toolsets.map((t) => [t.toolset_name, t.cancelled_text]));
  const failed = new Set(r.failures.map((f) => f.index));
  plan.expect.forEach((exp, i) => {
    const tu = plan.toolUses[i]!;
    const res = r.tool_results[i];
    if (!res || res.tool_use_id !== tu.id) return; // counted as lost/crossed already
    const text = textOf(res);
    const crossed = (what: string): void => {
      stats.crossed++;
      problem(`${tag} ${batchId} call ${i} (${tu.name}): ${what}`);
    };
    if (exp.kind === 'error' || exp.kind === 'not_executed') {
      // A malformed input: its refusal is the answer we wanted.
      if (exp.kind === 'error') {
        const f = r.failures.find((x) => x.index === i);
        if (!res.is_error || f?.error.type !== exp.type || !exp.text.test(text)) {
          if (f && expectFailure(f.error)) return;
          crossed(`expected ${exp.type} matching ${exp.text}, got ${f?.error.type} ${JSON.stringify(text)}`);
        }
      } else if (text !== exp.text) crossed(`expected the not-executed text, got ${JSON.stringify(text)}`);
      return;
    }
    if (res.is_error) {
      if (failed.has(i)) return; // judged with the failures
      const family = tu.toolset_name ?? '';
      if (text === halt.get(family)) return;
      if (r.cancelled && text === cancelledText.get(family)) return;
      crossed(`an error result that is neither a failure, the halt text nor a cancellation: ${text}`);
      return;
    }
    stats.contentChecks++;
    switch (exp.kind) {
      case 'cursor': {
        const move = r.tool_results[exp.moveIndex];
        if (move?.is_error) return; // the pointer was not moved by us: nothing to compare
        const want = `X=${exp.coordinate[0]},Y=${exp.coordinate[1]}`;
        if (text !== want) crossed(`cursor_position read ${JSON.stringify(text)}, this batch moved to ${want}`);
        return;
      }
      case 'image': {
        if (!res.content.some((b) => b.type === 'image')) crossed('no image block');
        const file = r.screenshots.find((s) => s.tool_use_id === tu.id);
        if (!file) crossed('no screenshot file listed');
        else {
          stats.screenshotsWritten++;
          stats.maxScreenshotBytes = Math.max(stats.maxScreenshotBytes, file.bytes);
          if (!file.path.startsWith(`${sessionId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 96)}/`)) {
            crossed(`screenshot file ${file.path} is not in this session's folder`);
          }
        }
        return;
      }
      case 'navigate': {
        const want = `Navigated to ${exp.url} — ${exp.title} (HTTP 200)`;
        if (text.split('\n')[0] !== want) crossed(`navigate said ${JSON.stringify(text)}, want ${want}`);
        return;
      }
      case 'page':
        stats.pageChecks++;
        checkPage(run, text, exp.tag, exp.n, crossed);
        return;
      case 'outline': {
        if (!text.includes(`marker ${exp.tag} round ${exp.n}`)) crossed(`read_page lacks the marker: ${text}`);
        return;
      }
      case 'tabs': {
        const state = res.content.find((b) => b.type === 'browser_state');
        const tabs = state?.type === 'browser_state' ? state.tabs : [];
        if (tabs.length < exp.atLeast) crossed(`list_tabs shows ${tabs.length} tabs after a navigation`);
        for (const t of tabs) {
          if (t.url !== 'about:blank' && !t.url.startsWith(`${opts.webOrigin}/s/${exp.tag}/`)) {
            crossed(`list_tabs shows a tab of someone else: ${t.url}`);
          }
        }
        return;
      }
      case 'ack':
        return;
    }
  });
}

/** A marker page: this session's marker and round, and only this session's cookie and (earlier) storage. */
export function checkPage(run: LoadRun, text: string, tag: string, n: number, crossed: (what: string) => void): void {
  const { stats } = run;
  if (!text.includes(`marker ${tag} round ${n}`)) crossed(`page text lacks its marker: ${text}`);
  for (const m of text.matchAll(/marker (\S+) round (\d+)/g)) {
    if (m[1] !== tag || Number(m[2]) !== n) crossed(`page text shows ${m[0]}`);
  }
  const cookie = /request-cookie=\[([^\]]*)\]/.exec(text)?.[1];
  if (cookie === undefined || (cookie !== '' && cookie !== `who=${tag}`)) {
    crossed(`the browser sent cookies ${JSON.stringify(cookie)}; only who=${tag} may be there`);
  }
  const prev = /prev-storage=\[([^\]]*)\]/.exec(text)?.[1];
  const pm = prev === undefined ? null : /^([A-Za-z0-9_-]+):(\d+)$/.exec(prev);
  if (prev === undefined || (prev !== '' && (!pm || pm[1] !== tag || Number(pm[2]) >= n))) {
    crossed(`localStorage held ${JSON.stringify(prev)}; only ${tag}:<earlier round> may be there`);
  }
  if (cookie === `who=${tag}` && pm) stats.isolationChecks++;
}
