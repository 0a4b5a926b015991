/**
 * Protobuf bytes of a message made only of length-delimited fields whose values are encoded already:
 * `leading` (if any) first, then each of `items` as the repeated field `field`. Used where a message
 * gathers other messages that were encoded when they were sent (usage batches, exchange batches), so
 * nothing is encoded twice.
 */
export function encodeRepeatedBytes(field: number, items: readonly Uint8Array[], leading?: { field: number; bytes: Uint8Array }): Uint8Array {
  const tag = (field << 3) | 2;
  let size = leading ? fieldLength(leading.field, leading.bytes) : 0;
  for (const item of items) size += fieldLength(field, item);
  const out = new Uint8Array(size);
  let offset = 0;
  const put = (fieldTag: number, bytes: Uint8Array) => {
    offset = writeVarint(out, offset, fieldTag);
    offset = writeVarint(out, offset, bytes.length);
    out.set(bytes, offset);
    offset += bytes.length;
  };
  if (leading) put((leading.field << 3) | 2, leading.bytes);
  for (const item of items) put(tag, item);
  return out;
}

function fieldLength(field: number, bytes: Uint8Array): number {
  return varintLength((field << 3) | 2) + varintLength(bytes.length) + bytes.length;
}

function writeVarint(out: Uint8Array, offset: number, value: number): number {
  while (value > 0x7f) {
    out[offset++] = (value & 0x7f) | 0x80;
    value >>>= 7;
  }
  out[offset++] = value;
  return offset;
}

function varintLength(value: number): number {
  let length = 1;
  while (value > 0x7f) {
    value >>>= 7;
    length++;
  }
  return length;
}
