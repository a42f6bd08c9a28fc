/** Browser members (filled in as they are implemented). */
export const OPTIONAL_MEMBERS = [] as const;
