/**
 * Token buckets for the handshake and message rate limits (issue 4, promise 6):
 * a burst of `capacity`, refilled at `perSecond`.
 *
 * Kept hand-written (issue 13 looked): the bucket is a few lines of
 * arithmetic, asked synchronously in the handshake check and on every frame.
 * The rate-limit packages on npm answer with a promise per request
 * (`rate-limiter-flexible`'s `consume`) or are HTTP middleware
 * (`express-rate-limit`), count in fixed windows rather than a refilling
 * burst, and keep a key until it expires rather than at most `maxKeys`; none
 * keys IPv6 by its /64 (`handshakeKey`). Wrapping one would be longer than this.
 */
import { isIP } from 'node:net';

export class TokenBucket {
  private tokens: number;
  private last = performance.now();

  constructor(
    private readonly capacity: number,
    private readonly perSecond: number,
  ) {
    this.tokens = capacity;
  }

  /** Takes one token; false when the bucket is empty. */
  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.capacity, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** One bucket per key (a remote address), at most `maxKeys` remembered, the least recently used dropped. */
export class KeyedBuckets {
  private readonly buckets = new Map<string, TokenBucket>();

  constructor(
    private readonly capacity: number,
    private readonly perSecond: number,
    private readonly maxKeys = 1024,
  ) {}

  take(key: string): boolean {
    let bucket = this.buckets.get(key);
    if (bucket) this.buckets.delete(key);
    else bucket = new TokenBucket(this.capacity, this.perSecond);
    this.buckets.set(key, bucket);
    if (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    return bucket.take();
  }
}

/**
 * The key a remote address is rate-limited under: an IPv4 address as it is (also when it arrives IPv4-mapped,
 * `::ffff:a.b.c.d`), an IPv6 address by its /64, the smallest prefix a site is given: one host holds a whole /64
 * and could otherwise take a fresh bucket with every address.
 */
export function handshakeKey(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped) return mapped[1]!;
  const plain = address.split('%')[0]!.toLowerCase(); // a zone id (fe80::1%eth0) is not part of the address
  if (isIP(plain) !== 6) return address;
  // A dotted IPv4 tail (64:ff9b::1.2.3.4) fills the last two groups.
  const groupsText = plain.replace(/\d{1,3}(?:\.\d{1,3}){3}$/, '0:0');
  const [head = '', tail] = groupsText.split('::');
  const first = head ? head.split(':') : [];
  const last = tail ? tail.split(':') : [];
  const groups =
    tail === undefined ? first : [...first, ...Array<string>(8 - first.length - last.length).fill('0'), ...last];
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

export interface HandshakeLimits {
  handshakeBurst: number;
  handshakesPerSecond: number;
  globalHandshakeBurst: number;
  globalHandshakesPerSecond: number;
}

/**
 * The handshake budget: one bucket per address (IPv6: per /64), and one for all addresses together, so that
 * many addresses (a botnet, or more than the 1024 remembered) cannot flood either. The per-address bucket is
 * asked first: an address past its own budget spends none of the shared one.
 */
export class HandshakeLimiter {
  private readonly perAddress: KeyedBuckets;
  private readonly global: TokenBucket;

  constructor(limits: HandshakeLimits) {
    this.perAddress = new KeyedBuckets(limits.handshakeBurst, limits.handshakesPerSecond);
    this.global = new TokenBucket(limits.globalHandshakeBurst, limits.globalHandshakesPerSecond);
  }

  take(address: string): boolean {
    return this.perAddress.take(handshakeKey(address)) && this.global.take();
  }
}
