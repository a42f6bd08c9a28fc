/**
 * The MCP tools a deskbatch MCP server lists (docs/MCP.md "Tools"): one per
 * served toolset member, named `<toolset_name>_<member>` (`computer_screenshot`,
 * `browser_navigate`), and `run_batch`. Everything is derived from the one
 * member table (toolsets/): through the toolsets the executor serves (built
 * from it by `defineToolset`), or, for another daemon (`--connect`), from the
 * table itself filtered by that daemon's `welcome`. The names and their order,
 * the description (the member's `summary`), the input schema (the member's zod
 * schema as JSON Schema) all come from there: no list of tools is written
 * here, so a new or disabled member shows in MCP as it does in `welcome`.
 */
import { z } from 'zod';
import type { ToolsetInfo } from '../base/protocol.ts';
import type { Toolset } from '../toolset-api/types.ts';

/** The tool that runs several calls as one batch. */
export const RUN_BATCH_TOOL = 'run_batch';

/** A tool as `tools/list` gives it (the MCP `Tool` fields deskbatch fills). */
export interface McpTool {
  name: string;
  description: string;
  inputSchema: { type: 'object'; [key: string]: unknown };
}

/** The toolset call a member's tool stands for: the `toolset_name` and `name` of its `tool_use`. */
export interface MemberCall {
  toolset_name: string;
  name: string;
}

/** `<toolset_name>_<member>`: the MCP name of a member's tool. */
export function memberToolName(toolsetName: string, member: string): string {
  return `${toolsetName}_${member}`;
}

/** A zod schema as the JSON Schema an MCP `inputSchema` holds: what the caller sends, for MCP's default dialect. */
function inputSchema(schema: z.ZodType): McpTool['inputSchema'] {
  // MCP's default dialect is 2020-12, which z.toJSONSchema writes; `$schema` is left out for hosts that pass the
  // schema on to an API that does not take it.
  const { $schema: _dialect, ...json } = z.toJSONSchema(schema, { io: 'input' }) as Record<string, unknown>;
  return { ...json, type: 'object' };
}

/** A toolset's members as the tools are made from them: what a `Toolset` and a member table both give. */
export interface ToolsetTable {
  /** Its `toolset_name`. */
  name: string;
  /** The API's tool type. */
  type: string;
  members: readonly { name: string; summary: string; input: z.ZodType }[];
}

/** The tables of the toolsets a daemon serves (`Executor.served`), with the members it serves, in order. */
export function servedTables(served: ReadonlyMap<string, Toolset>): ToolsetTable[] {
  return [...served.values()].map((t) => ({ name: t.name, type: t.type, members: [...t.members.values()] }));
}

/**
 * The member tables cut to what another daemon's `welcome` lists, in its order; a member this build's table does
 * not know (a newer daemon's) is left out and named in `unknown`.
 */
export function offeredTables(
  tables: readonly ToolsetTable[],
  offered: readonly ToolsetInfo[],
): { tables: ToolsetTable[]; unknown: string[] } {
  const unknown: string[] = [];
  const cut = offered.map((info) => {
    const table = tables.find((t) => t.name === info.toolset_name);
    const members = info.members.flatMap((name) => {
      const member = table?.members.find((m) => m.name === name);
      if (!member) unknown.push(memberToolName(info.toolset_name, name));
      return member ? [member] : [];
    });
    return { name: info.toolset_name, type: info.type, members };
  });
  return { tables: cut, unknown };
}

/** One call of `run_batch`'s `calls`, as its input schema reads it. */
export interface BatchCall {
  name: string;
  input?: Record<string, unknown> | undefined;
}

/** The tools, from the toolsets' tables (`servedTables`, `offeredTables`). */
export class ToolTable {
  /** Every tool, in `tools/list` order: each toolset's members in its table's order, then `run_batch`. */
  readonly tools: readonly McpTool[];
  /** `run_batch`'s input, checked before any of its calls runs. */
  readonly batchInput: z.ZodType<{ calls: BatchCall[] }>;
  private readonly calls = new Map<string, MemberCall>();

  constructor(tables: readonly ToolsetTable[], maxCalls: number) {
    const tools: McpTool[] = [];
    for (const toolset of tables) {
      for (const member of toolset.members) {
        const name = memberToolName(toolset.name, member.name);
        this.calls.set(name, { toolset_name: toolset.name, name: member.name });
        tools.push({
          name,
          description: `${member.summary} (the ${toolset.name} toolset's ${member.name}: ${toolset.type})`,
          inputSchema: inputSchema(member.input),
        });
      }
    }
    const names = [...this.calls.keys()];
    this.batchInput = z.strictObject({
      calls: z
        .array(
          z.strictObject({
            name: z.enum(names as [string, ...string[]]).describe('One of the other tools of this server, by name.'),
            input: z.record(z.string(), z.unknown()).optional().describe("That tool's input."),
          }),
        )
        .min(1)
        .max(maxCalls)
        .describe(`The calls, run in this order; at most ${maxCalls}.`),
    });
    tools.push({
      name: RUN_BATCH_TOOL,
      description:
        "Runs several of this server's other tools in one go, in order, as one assistant turn's tool calls: once " +
        "a call of a toolset fails, that toolset's later calls are not executed (each answered with its " +
        "not-executed text), while the other toolset's go on. Each call's result follows a line naming it, in order.",
      inputSchema: inputSchema(this.batchInput),
    });
    this.tools = tools;
  }

  /** The member call a listed tool stands for; undefined for `run_batch` and any name not listed. */
  call(name: string): MemberCall | undefined {
    return this.calls.get(name);
  }
}
