/**
 * The other end of bench/anatomy.ts's IPC round trip: answers each message
 * with `{ id, ok: true, result }`, where result carries a Buffer of the asked
 * size (0 for a small op), the way the desktop worker answers a capture.
 * Says `{ type: 'ready' }` first. Exits when its parent goes.
 */
const images = new Map<number, Buffer>();

function payload(bytes: number): Buffer {
  let b = images.get(bytes);
  if (!b) {
    b = Buffer.alloc(bytes, 7);
    images.set(bytes, b);
  }
  return b;
}

process.on('message', (msg: { id: number; args?: { replyBytes?: number } }) => {
  const bytes = msg.args?.replyBytes ?? 0;
  const result = bytes > 0 ? { data: payload(bytes), mediaType: 'image/png', width: 1, height: 1 } : { x: 1, y: 2 };
  process.send!({ id: msg.id, ok: true, result });
});
process.on('disconnect', () => process.exit(0));
process.send!({ type: 'ready' });
