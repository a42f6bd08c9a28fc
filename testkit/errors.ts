/**
 * An exact expectation for `assert.throws` / `assert.rejects`: the error's
 * class and its whole message, so that a case cannot pass on another error
 * of the same class (a wrong input refused for another reason).
 */
import assert from 'node:assert/strict';

type ErrorClass<E extends Error> = abstract new (...args: never[]) => E;

/** The error is an instance of `type` and its message is `message` (a string: exactly; a RegExp: it must be anchored, ^…$). */
export function failsWith<E extends Error>(type: ErrorClass<E>, message: string | RegExp): (err: unknown) => true {
  if (message instanceof RegExp) {
    assert.ok(
      message.source.startsWith('^') && message.source.endsWith('$'),
      `${message} is anchored on the whole message`,
    );
  }
  return (err) => {
    assert.ok(err instanceof type, `expected a ${type.name}, got ${String(err)}`);
    if (typeof message === 'string') assert.equal(err.message, message);
    else assert.match(err.message, message);
    return true;
  };
}
