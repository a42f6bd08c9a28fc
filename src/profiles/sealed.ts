/**
 * How a profile is kept at rest (docs/SECURITY.md "Profiles at rest"):
 * AES-256-GCM under the operator's key (`--profile-key FILE`), one file per
 * profile:
 *
 *   magic "DBPF" (4) | version 1 (1) | key id (8) | IV (12, random) | ciphertext | tag (16)
 *
 * The additional authenticated data is the header (magic, version, key id)
 * and the profile's name, so a file copied or renamed to another profile's
 * name fails to open, as does one changed by a single bit. The key id
 * (HMAC-SHA-256 of a fixed label under the key, 8 bytes) tells "sealed with
 * another key" apart from "damaged" in the error, and lets an operator check
 * that every pod of a fleet has the same key without printing it; it says
 * nothing about the key.
 *
 * The key lives in a `KeyObject` (its bytes are never in a string, and
 * `util.inspect` does not show them); nothing here logs.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createSecretKey,
  randomBytes,
  type KeyObject,
} from 'node:crypto';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { ConfigError } from '../base/config.ts';

const MAGIC = Buffer.from('DBPF', 'latin1');
const VERSION = 1;
const KEY_ID_BYTES = 8;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = MAGIC.length + 1 + KEY_ID_BYTES;
/** What sealing adds to the plaintext: the header, the IV and the tag. */
export const SEAL_OVERHEAD = HEADER_BYTES + IV_BYTES + TAG_BYTES;
export const KEY_BYTES = 32;
/** A key file longer than this is none of the three forms: not read further. */
const KEY_FILE_MAX_BYTES = 256;

/** The operator's key, and its id (hex, safe to log: docs/SECURITY.md "Profiles at rest"). */
export interface ProfileKey {
  readonly secret: KeyObject;
  /** 16 hex characters: the same key gives the same id on every daemon. */
  readonly id: string;
}

/** A key from its 32 bytes (which the caller may then overwrite). */
export function profileKey(bytes: Buffer): ProfileKey {
  if (bytes.length !== KEY_BYTES) throw new Error(`a profile key is ${KEY_BYTES} bytes, got ${bytes.length}`);
  const secret = createSecretKey(bytes);
  const id = createHmac('sha256', secret).update('deskbatch profile key id').digest().subarray(0, KEY_ID_BYTES);
  return { secret, id: id.toString('hex') };
}

/**
 * The key in `path` (`--profile-key`): 32 bytes raw, or 64 hex characters, or the base64 of 32 bytes
 * (standard or URL alphabet), surrounding whitespace and a trailing newline allowed in the two text forms.
 * A ConfigError, saying what is wrong and never any byte of the file, when it is missing, not a regular file,
 * readable or writable by its group or others, or none of the three forms.
 */
export async function loadProfileKey(path: string): Promise<ProfileKey> {
  const refuse = (why: string): ConfigError => new ConfigError(`--profile-key ${path}: ${why}`);
  // A link is followed (a mounted secret's file often is one): the mode checked is that of the file opened,
  // through its descriptor, so it is the file whose bytes are read.
  const file = await open(path, constants.O_RDONLY).catch((err: NodeJS.ErrnoException) => {
    throw refuse(`cannot read it (${err.code ?? err.message})`);
  });
  let raw: Buffer;
  try {
    const s = await file.stat();
    if (!s.isFile()) throw refuse('is not a regular file');
    if ((s.mode & 0o077) !== 0) {
      throw refuse(
        `its mode is ${(s.mode & 0o777).toString(8).padStart(4, '0')}: group and others may not read or write ` +
          `a key file (chmod 600 ${path})`,
      );
    }
    if (s.size > KEY_FILE_MAX_BYTES) throw refuse(keyForms(`it holds ${s.size} bytes`));
    raw = await file.readFile();
  } finally {
    await file.close();
  }
  try {
    const bytes = decodeKey(raw);
    if (!bytes) throw refuse(keyForms(`it holds ${raw.length} bytes`));
    try {
      return profileKey(bytes);
    } finally {
      bytes.fill(0);
    }
  } finally {
    raw.fill(0);
  }
}

const keyForms = (found: string): string =>
  `${found}, which is not a key: give 32 bytes raw, 64 hex characters, or the base64 of 32 bytes ` +
  '(e.g. `openssl rand -out FILE 32`, or `openssl rand -hex 32 > FILE`)';

/** The key's 32 bytes from one of the three forms, or undefined. */
function decodeKey(raw: Buffer): Buffer | undefined {
  if (raw.length === KEY_BYTES) return Buffer.from(raw);
  const text = raw.toString('latin1').trim();
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(text)) {
    const bytes = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    if (bytes.length === KEY_BYTES) return bytes;
    bytes.fill(0);
  }
  return undefined;
}

/** Why a sealed file did not open. `message` says it in words; no byte of the file or the key is in it. */
export class SealError extends Error {
  override readonly name = 'SealError';
  constructor(
    readonly reason: 'not_sealed' | 'version' | 'other_key' | 'damaged',
    message: string,
  ) {
    super(message);
  }
}

function header(key: ProfileKey): Buffer {
  return Buffer.concat([MAGIC, Buffer.from([VERSION]), Buffer.from(key.id, 'hex')]);
}

/** What the tag also covers: the header and the profile's name, so a file opens only under its own name. */
function aad(head: Buffer, name: string): Buffer {
  return Buffer.concat([head, Buffer.from(name, 'utf8')]);
}

/** `plaintext` sealed for the profile `name` under `key`, in the file format above. */
export function seal(key: ProfileKey, name: string, plaintext: Buffer): Buffer {
  const head = header(key);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key.secret, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad(head, name));
  const body = cipher.update(plaintext);
  const final = cipher.final();
  return Buffer.concat([head, iv, body, final, cipher.getAuthTag()]);
}

/** The plaintext of the file `sealed` of the profile `name`, or a SealError; never a part of it. */
export function unseal(key: ProfileKey, name: string, sealed: Buffer): Buffer {
  if (sealed.length < SEAL_OVERHEAD || !sealed.subarray(0, MAGIC.length).equals(MAGIC)) {
    throw new SealError('not_sealed', 'the file is not a sealed profile (its header is missing)');
  }
  const version = sealed[MAGIC.length];
  if (version !== VERSION) {
    throw new SealError('version', `the file is sealed in format ${version}; this daemon reads format ${VERSION}`);
  }
  const head = sealed.subarray(0, HEADER_BYTES);
  const keyId = head.subarray(MAGIC.length + 1).toString('hex');
  if (keyId !== key.id) {
    throw new SealError(
      'other_key',
      `the file was sealed with another key (key id ${keyId}; this daemon's is ${key.id}): give the daemon that key (--profile-key)`,
    );
  }
  const iv = sealed.subarray(HEADER_BYTES, HEADER_BYTES + IV_BYTES);
  const tag = sealed.subarray(sealed.length - TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key.secret, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(aad(head, name));
  decipher.setAuthTag(tag);
  const body = decipher.update(sealed.subarray(HEADER_BYTES + IV_BYTES, sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([body, decipher.final()]);
  } catch {
    body.fill(0);
    throw new SealError(
      'damaged',
      'the file does not authenticate: it was changed, damaged, or sealed for another profile name',
    );
  }
}
