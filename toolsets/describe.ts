/**
 * What a `welcome` says about the tools this daemon serves: per toolset its
 * members, texts and the `tools[]` entry an agent sends to the API, and, on
 * request, the older `computer` tool's entries. Toolset knowledge, kept here
 * so the server knows only the protocol: the daemon hands the server this
 * function.
 */
import type { Size } from '../src/base/geometry.ts';
import type { LegacyComputerTools, ToolsetInfo } from '../src/base/protocol.ts';
import type { PlainTool, Toolset } from '../src/toolset-api/types.ts';

export interface ToolDescriptions {
  toolsets: ToolsetInfo[];
  /** The older tool's `tools[]` entries: when asked for, served, and the screenshot size is known. */
  legacy_tools?: LegacyComputerTools;
}

export type DescribeToolsets = (options: { legacyTools?: boolean; screenshot?: Size }) => ToolDescriptions;

export function describeToolsets(served: ReadonlyMap<string, Toolset>, plainTool?: PlainTool): DescribeToolsets {
  return ({ legacyTools, screenshot }) => {
    // A toolset with no member served is not offered: the API rejects an entry that disables every member.
    const offered = [...served.values()].filter((t) => t.members.size > 0);
    const toolsets: ToolsetInfo[] = offered.map((t) => {
      // configs: switch off what the API enables by default but this daemon does not serve, and switch on
      // optional members the operator enabled (docs/TOOLSETS.md B1, C1).
      const optional = t.optionalMemberNames ?? [];
      const configs: Record<string, { enabled: boolean }> = {};
      for (const name of t.allMemberNames) {
        const on = t.members.has(name);
        if (optional.includes(name) ? on : !on) configs[name] = { enabled: on };
      }
      return {
        type: t.type,
        toolset_name: t.name,
        members: [...t.members.keys()],
        not_executed_text: t.notExecutedText,
        cancelled_text: t.cancelledText,
        tool: {
          type: t.type,
          ...(Object.keys(configs).length ? { configs } : {}),
        },
      };
    });
    // Agents on computer_20250124/20251124 get their tools[] entry, sized in screenshot pixels.
    const legacy = legacyTools && screenshot && plainTool ? plainTool.describe(screenshot) : undefined;
    return { toolsets, ...(legacy ? { legacy_tools: legacy } : {}) };
  };
}
