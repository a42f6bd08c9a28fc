/** Browser members (filled in as they are implemented). */
export const NAVIGATION_MEMBERS = [] as const;
