/** Type-level equality used by the SDK input checks. */

/** Keys without index signatures (zod infers `z.object({})` as `Record<string, never>`). */
export type KnownKeys<T> = keyof { [K in keyof T as string extends K ? never : K]: T[K] };
export type OptionalKeys<T> = { [K in KnownKeys<T>]-?: object extends Pick<T, K> ? K : never }[KnownKeys<T>];
export type SameSet<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export type Shared<A, B> = KnownKeys<A> & KnownKeys<B>;
/** Every shared key's type is the same both ways (true for no keys). */
export type SameProps<A, B> = [{ [K in Shared<A, B>]: SameSet<A[K & keyof A], B[K & keyof B]> }[Shared<A, B>]] extends [
  true,
]
  ? true
  : false;
/** Same keys, same optionality, same property types. */
export type Same<A, B> =
  SameSet<KnownKeys<A>, KnownKeys<B>> extends true
    ? SameSet<OptionalKeys<A>, OptionalKeys<B>> extends true
      ? SameProps<A, B>
      : false
    : false;
export type Assert<T extends true> = T;
