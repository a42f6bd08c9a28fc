/**
 * Rewrites the trace.zip Playwright saved for a recorded session's browser
 * context, so it keeps only what the operator chose (docs/RECORDING.md,
 * "Privacy"). What Playwright 1.65 writes into it:
 * - `trace.trace`: JSON Lines of the context's calls (`before`/`after`
 *   events with their params and results, `log` lines, `input`), DOM
 *   snapshots (`frame-snapshot`: the document as nested arrays, each
 *   input's and textarea's current value in the attribute
 *   `__playwright_value_`, password fields included), screencast frames,
 *   console messages, page events;
 * - `trace.network`: JSON Lines, one HAR entry per request
 *   (`resource-snapshot`): URL, headers, cookies, timings, and bodies as
 *   references `_file: "resources/<sha1>.<ext>"` (the response's
 *   `content._file`, the request's `postData._file`, a WebSocket's frames);
 *   urlencoded request bodies also as `postData.params`. Scripts' bodies
 *   are never stored;
 * - `resources/`: those bodies, and the stylesheets DOM snapshots override;
 *   `screencast/`: JPEG frames; `trace.stacks`: the daemon's own call stacks.
 *
 * Network bodies off: request bodies go, and response bodies but
 * stylesheets', fonts' and images' (DOM snapshots render with those), with
 * every `resources/` file nothing kept refers to any more. Typed text
 * redacted: the text params of typing calls become `[N characters]`, as do
 * input and textarea values in DOM snapshots, and every other occurrence of
 * a typed string of at least SCRUB_MIN_CHARS characters in the JSON, and in
 * kept bodies, is replaced too. Passwords: the same, only for password
 * fields' values and the typed text found in them.
 */
import { rm, stat } from 'node:fs/promises';
import { ZipReader, ZipWriter, ZIP_ENTRY_MAX_BYTES, type ZipEntry } from './zip.ts';

export interface TraceRewriteOptions {
  /** Keep every network body (else only stylesheets, fonts and images). */
  networkBodies: boolean;
  /** Text the model typed becomes `[N characters]`. */
  redactTyped: boolean;
  /** Values of password fields, and the typed text found in them, become `[N characters]`. */
  redactPasswords?: boolean;
  /**
   * Every form field's value in the DOM snapshots becomes `[N characters]`: a person typed on the desktop
   * (a takeover, docs/VIEWER.md), and what they typed is not kept.
   */
  redactFields?: boolean;
  /** Largest entry inflated (default ZIP_ENTRY_MAX_BYTES); a larger one fails the rewrite. */
  maxEntryBytes?: number;
}

/** What a rewrite changed, for the log and the tests. */
export interface TraceRewriteReport {
  entries: number;
  /** Request and response bodies whose references were removed. */
  bodiesDropped: number;
  /** `resources/` files removed. */
  resourcesRemoved: number;
  /** Call params, snapshot values and other strings redacted. */
  redactions: number;
  /** JSON lines that did not parse and were left out. */
  linesDropped: number;
  /** Sizes of the archive Playwright wrote and of the one written. */
  bytesIn: number;
  bytesOut: number;
}

/** Typed strings shorter than this are redacted where they were typed, not searched for elsewhere. */
export const SCRUB_MIN_CHARS = 4;

/** Calls whose params carry typed text: `class.method` → the param. */
const TYPING_PARAMS: Record<string, string> = {
  'Page.keyboardType': 'text',
  'Page.keyboardInsertText': 'text',
  'Frame.type': 'text', // Locator.pressSequentially, page.type
  'ElementHandle.type': 'text',
  'Frame.fill': 'value',
  'ElementHandle.fill': 'value',
};
/** Key presses: a single character pressed is typed text, a key name ("Enter", "Control+a") is not. */
const KEY_PARAMS: Record<string, string> = {
  'Page.keyboardPress': 'key',
  'Page.keyboardDown': 'key',
  'Page.keyboardUp': 'key',
  'Frame.press': 'key',
  'ElementHandle.press': 'key',
};
/** CDP commands that type text, if a caller sends them itself. */
const CDP_TYPING = new Set(['Input.insertText', 'Input.dispatchKeyEvent', 'Input.imeSetComposition']);
/** Keys whose string values are ids and file names, never page content: not scrubbed. */
const STRUCTURAL_KEYS = new Set([
  'type',
  'callId',
  'parentId',
  'stepId',
  'pageId',
  'openerPageId',
  'frameId',
  'pageref',
  '_frameref',
  'file',
  '_file',
  'sha1',
  '_sha1',
  'class',
  'method',
]);
const VALUE_ATTRIBUTE = '__playwright_value_';

export const redacted = (text: string): string => `[${[...text].length} characters]`;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (v: Json | undefined): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A body the trace keeps even with bodies off: what DOM snapshots need to render. */
function keepsBody(content: JsonObject, resourceType: Json | undefined): boolean {
  if (resourceType === 'stylesheet' || resourceType === 'font' || resourceType === 'image') return true;
  const mime = typeof content.mimeType === 'string' ? content.mimeType.split(';')[0]!.trim().toLowerCase() : '';
  return (
    mime === 'text/css' ||
    mime.startsWith('image/') ||
    mime.startsWith('font/') ||
    /^application\/(x-)?font/.test(mime) ||
    mime === 'application/vnd.ms-fontobject'
  );
}

/** The `resources/` entry a body reference names (`_file`, or `_sha1` of older traces). */
function bodyRef(holder: JsonObject): string | undefined {
  if (typeof holder._file === 'string') return holder._file;
  if (typeof holder._sha1 === 'string') return `resources/${holder._sha1}`;
  return undefined;
}

function dropBody(holder: JsonObject, dropped: Set<string>): boolean {
  const ref = bodyRef(holder);
  const hadText = typeof holder.text === 'string' && holder.text !== '';
  const hadParams = Array.isArray(holder.params) && holder.params.length > 0;
  if (!ref && !hadText && !hadParams) return false;
  if (ref) dropped.add(ref);
  delete holder._file;
  delete holder._sha1;
  if ('text' in holder) holder.text = '';
  if ('params' in holder) holder.params = [];
  holder.comment = 'body not recorded (deskbatch: network bodies off)';
  return true;
}

/** Splits JSON Lines without making one string of the whole entry (a trace can pass V8's string limit). */
function* lines(data: Buffer): Generator<string> {
  let start = 0;
  while (start < data.length) {
    let end = data.indexOf(0x0a, start);
    if (end < 0) end = data.length;
    if (end > start) yield data.toString('utf8', start, end);
    start = end + 1;
  }
}

/** Every string the typed text may appear as in a body: raw, JSON-escaped, URL- and form-encoded. */
function encodings(secret: string): string[] {
  const json = JSON.stringify(secret).slice(1, -1);
  const uri = encodeURIComponent(secret);
  const form = uri.replace(/%20/g, '+');
  return [...new Set([secret, json, uri, form])];
}

class Redactor {
  /** Each typed string in each of its encodings, with the string it encodes; longest first (one may contain another). */
  private readonly forms: { form: string; replacement: string }[];
  count = 0;

  constructor(secrets: Iterable<string>) {
    const scrub = [...new Set(secrets)].filter((s) => [...s].length >= SCRUB_MIN_CHARS);
    const forms = new Map<string, string>();
    for (const secret of scrub)
      for (const form of encodings(secret)) if (!forms.has(form)) forms.set(form, redacted(secret));
    this.forms = [...forms]
      .map(([form, replacement]) => ({ form, replacement }))
      .sort((a, b) => b.form.length - a.form.length);
  }

  get active(): boolean {
    return this.forms.length > 0;
  }

  /** `text` with every typed string replaced (in decoded JSON strings: the raw and URL-encoded forms). */
  text(text: string): string {
    let out = text;
    for (const { form, replacement } of this.forms) {
      if (out.includes(form)) {
        this.count++;
        out = out.split(form).join(replacement);
      }
    }
    return out;
  }

  /** Replaces typed strings in every string of `value` but ids and file names; returns the new value. */
  json(value: Json, key?: string): Json {
    if (typeof value === 'string') return key && STRUCTURAL_KEYS.has(key) ? value : this.text(value);
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) value[i] = this.json(value[i]!);
      return value;
    }
    if (isObject(value)) {
      for (const k of Object.keys(value)) value[k] = this.json(value[k]!, k);
    }
    return value;
  }

  /** A body's bytes with the typed strings replaced in all their encodings; the same Buffer if none occurs. */
  bytes(data: Buffer): Buffer {
    let out = data;
    for (const { form, replacement } of this.forms) {
      const needle = Buffer.from(form, 'utf8');
      if (out.indexOf(needle) < 0) continue;
      this.count++;
      const instead = Buffer.from(replacement, 'utf8');
      const parts: Buffer[] = [];
      let at = 0;
      for (let i = out.indexOf(needle); i >= 0; i = out.indexOf(needle, at)) {
        parts.push(out.subarray(at, i), instead);
        at = i + needle.length;
      }
      parts.push(out.subarray(at));
      out = Buffer.concat(parts);
    }
    return out;
  }
}

/** Visits each element of a DOM snapshot's `html` tree: [tag, attributes, ...children]; [[n, i]] refers back. */
function visitElements(node: Json, visit: (tag: string, attrs: JsonObject) => void): void {
  if (!Array.isArray(node) || typeof node[0] !== 'string') return;
  const attrs = node[1];
  if (isObject(attrs)) visit(node[0], attrs);
  for (let i = isObject(attrs) ? 2 : 1; i < node.length; i++) visitElements(node[i]!, visit);
}

const isPasswordInput = (tag: string, attrs: JsonObject): boolean =>
  tag.toUpperCase() === 'INPUT' && typeof attrs.type === 'string' && attrs.type.toLowerCase() === 'password';

/** Typed text of a `before` event: [params object, param name], if it carries any. */
function typingParam(event: JsonObject): [JsonObject, string] | undefined {
  const params = event.params;
  if (!isObject(params)) return undefined;
  const name = `${String(event.class)}.${String(event.method)}`;
  const text = TYPING_PARAMS[name];
  if (text && typeof params[text] === 'string') return [params, text];
  const key = KEY_PARAMS[name];
  if (key && typeof params[key] === 'string' && [...params[key]].length === 1) return [params, key];
  if (name === 'CDPSession.send' && typeof params.method === 'string' && CDP_TYPING.has(params.method)) {
    const inner = params.params;
    if (isObject(inner) && typeof inner.text === 'string') return [inner, 'text'];
  }
  return undefined;
}

const isJsonl = (name: string): boolean => name.endsWith('.trace') || name.endsWith('.network');

/**
 * Reads the trace at `input` and writes the rewritten one at `output`
 * (created, mode 0600; removed again if the rewrite fails).
 */
export async function rewriteTrace(
  input: string,
  output: string,
  options: TraceRewriteOptions,
): Promise<TraceRewriteReport> {
  const reader = await ZipReader.open(input, { maxEntryBytes: options.maxEntryBytes ?? ZIP_ENTRY_MAX_BYTES });
  try {
    const writer = await ZipWriter.create(output);
    try {
      const report = await new TraceRewrite(reader, options).write(writer);
      await writer.finish();
      report.bytesIn = (await stat(input)).size;
      report.bytesOut = writer.bytes;
      return report;
    } catch (err) {
      await writer.abort();
      await rm(output, { force: true });
      throw err;
    }
  } finally {
    await reader.close();
  }
}

/**
 * Two passes over the JSON Lines entries, one line at a time (parsed whole,
 * a long session's DOM snapshots would take several times their size in
 * memory): the first learns what to drop and what to redact, the second
 * writes.
 */
class TraceRewrite {
  private readonly report: TraceRewriteReport = {
    entries: 0,
    bodiesDropped: 0,
    resourcesRemoved: 0,
    redactions: 0,
    linesDropped: 0,
    bytesIn: 0,
    bytesOut: 0,
  };
  private readonly redactTyped: boolean;
  private readonly redactPasswords: boolean;
  private readonly redactFields: boolean;
  /** `resources/` files whose only references were dropped bodies' (once the references kept are subtracted). */
  private readonly dropped = new Set<string>();
  private readonly referenced = new Set<string>();
  /** JSON Lines entries the second pass rewrites; the others are copied as they are. */
  private readonly changed = new Set<string>();
  private readonly typed: string[] = [];
  private readonly passwordValues: string[] = [];
  private redactor = new Redactor([]);
  /** Typed texts of the calls redacted so far, by call id, for their log lines (which follow their `before`). */
  private readonly ownLines = new Map<string, string[]>();

  constructor(
    private readonly reader: ZipReader,
    private readonly options: TraceRewriteOptions,
  ) {
    this.redactTyped = options.redactTyped;
    this.redactPasswords = options.redactPasswords ?? false;
    this.redactFields = options.redactFields ?? false;
  }

  private get redacting(): boolean {
    return this.redactTyped || this.redactPasswords || this.redactFields;
  }

  async write(writer: ZipWriter): Promise<TraceRewriteReport> {
    const jsonl = this.reader.entries.filter((e) => isJsonl(e.name));
    for (const entry of jsonl) await this.eachEvent(entry, (event) => this.learn(entry.name, event));
    if (this.redacting) {
      const secrets = [...this.passwordValues, ...this.typed.filter((t) => this.redactsTyped(t))];
      this.redactor = new Redactor(secrets);
      for (const entry of jsonl) this.changed.add(entry.name);
    }
    for (const entry of this.reader.entries) {
      if (this.dropped.has(entry.name) && !this.referenced.has(entry.name)) {
        this.report.resourcesRemoved++;
        continue;
      }
      if (this.changed.has(entry.name)) {
        const out: Buffer[] = [];
        await this.eachEvent(
          entry,
          (event) => out.push(Buffer.from(`${JSON.stringify(this.transform(event))}\n`)),
          true,
        );
        await writer.add(entry.name, Buffer.concat(out));
      } else if (this.redactor.active && entry.name.startsWith('resources/')) {
        const data = await this.reader.read(entry);
        const scrubbed = this.redactor.bytes(data);
        if (scrubbed === data) await writer.copy(entry, await this.reader.raw(entry));
        else await writer.add(entry.name, scrubbed);
      } else {
        await writer.copy(entry, await this.reader.raw(entry));
      }
      this.report.entries++;
    }
    this.report.redactions += this.redactor.count;
    return this.report;
  }

  /** Calls `use` with each line's event; a line that does not parse is left out (and counted when `writing`). */
  private async eachEvent(entry: ZipEntry, use: (event: JsonObject) => void, writing = false): Promise<void> {
    for (const line of lines(await this.reader.read(entry))) {
      let event: Json;
      try {
        event = JSON.parse(line) as Json;
      } catch {
        if (writing) this.report.linesDropped++; // not checked, so not kept
        continue;
      }
      if (isObject(event)) use(event);
      else if (writing) this.report.linesDropped++;
    }
  }

  /** Whether typed `text` is redacted: all of it, or (passwords) what a password field held. */
  private redactsTyped(text: string): boolean {
    return this.redactTyped || (this.redactPasswords && this.passwordValues.some((v) => v.includes(text)));
  }

  /** First pass: what goes and what stays. The event is changed here only to see what it keeps. */
  private learn(entryName: string, event: JsonObject): void {
    if (!this.options.networkBodies && this.dropBodies(event, this.dropped) > 0) this.changed.add(entryName);
    if (this.redacting) {
      if (event.type === 'before') {
        const found = typingParam(event);
        const text = found?.[0][found[1]];
        if (typeof text === 'string' && text !== '') this.typed.push(text);
      } else if (this.redactPasswords && event.type === 'frame-snapshot' && isObject(event.snapshot)) {
        visitElements(event.snapshot.html ?? null, (tag, attrs) => {
          const value = attrs[VALUE_ATTRIBUTE];
          if (typeof value === 'string' && value !== '' && isPasswordInput(tag, attrs)) this.passwordValues.push(value);
        });
      }
    }
    collectReferences(event, this.referenced);
  }

  /** Removes the bodies the trace does not keep from a `resource-snapshot`; how many it had. */
  private dropBodies(event: JsonObject, dropped: Set<string>): number {
    if (event.type !== 'resource-snapshot' || !isObject(event.snapshot)) return 0;
    const { request, response, _resourceType } = event.snapshot;
    let count = 0;
    if (isObject(request) && isObject(request.postData) && dropBody(request.postData, dropped)) count++;
    if (isObject(response) && isObject(response.content) && !keepsBody(response.content, _resourceType)) {
      if (dropBody(response.content, dropped)) count++;
    }
    return count;
  }

  /** Second pass: the event as the rewritten trace holds it. */
  private transform(event: JsonObject): JsonObject {
    if (!this.options.networkBodies) this.report.bodiesDropped += this.dropBodies(event, new Set());
    if (!this.redacting) return event;
    if (event.type === 'before') {
      const found = typingParam(event);
      if (found) {
        const [params, key] = found;
        const text = params[key];
        if (typeof text === 'string' && text !== '' && this.redactsTyped(text)) {
          params[key] = redacted(text);
          this.report.redactions++;
          this.ownLines.set(String(event.callId), [...(this.ownLines.get(String(event.callId)) ?? []), text]);
        }
      }
    } else if (event.type === 'frame-snapshot' && isObject(event.snapshot)) {
      visitElements(event.snapshot.html ?? null, (tag, attrs) => {
        const value = attrs[VALUE_ATTRIBUTE];
        if (typeof value !== 'string' || value === '') return;
        const field = tag.toUpperCase();
        const typedField = (this.redactTyped || this.redactFields) && (field === 'INPUT' || field === 'TEXTAREA');
        if (typedField || (this.redactPasswords && isPasswordInput(tag, attrs))) {
          attrs[VALUE_ATTRIBUTE] = redacted(value);
          this.report.redactions++;
        }
      });
    } else if (event.type === 'log' && typeof event.message === 'string') {
      // A typing call's own log lines quote its text (`fill("…")`), however short it is.
      for (const text of this.ownLines.get(String(event.callId)) ?? []) {
        const quoted = JSON.stringify(text);
        if (event.message.includes(quoted)) {
          event.message = event.message.split(quoted).join(JSON.stringify(redacted(text)));
          this.report.redactions++;
        }
      }
    }
    if (this.redactor.active) this.redactor.json(event);
    return event;
  }
}

/** Adds the `resources/` files `value` refers to (a kept body, a stylesheet override…) to `into`. */
function collectReferences(value: Json, into: Set<string>, key?: string): void {
  if (typeof value === 'string') {
    if (value.startsWith('resources/')) into.add(value);
    else if (key === 'sha1' || key === '_sha1') into.add(`resources/${value}`);
  } else if (Array.isArray(value)) {
    for (const v of value) collectReferences(v, into);
  } else if (isObject(value)) {
    for (const k of Object.keys(value)) collectReferences(value[k]!, into, k);
  }
}
