// A small MessagePack codec (the subset the GUI's messages use: nil, booleans, integers, floats, strings, binary,
// arrays, maps). Shipped with the page so it works offline; no build step.
"use strict";

const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();

function msgpackDecode(buffer) {
  const bytes = new Uint8Array(buffer);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let pos = 0;

  function str(n) { const s = textDecoder.decode(bytes.subarray(pos, pos + n)); pos += n; return s; }
  function bin(n) { const b = bytes.slice(pos, pos + n); pos += n; return b; }
  function arr(n) { const out = new Array(n); for (let i = 0; i < n; i++) out[i] = read(); return out; }
  // no prototype: a key such as "__proto__" is just a key
  function map(n) { const out = Object.create(null); for (let i = 0; i < n; i++) { const k = read(); out[k] = read(); } return out; }
  function u8() { return view.getUint8(pos++); }
  function u16() { const v = view.getUint16(pos); pos += 2; return v; }
  function u32() { const v = view.getUint32(pos); pos += 4; return v; }

  function read() {
    const b = u8();
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    let v;
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(u8());
      case 0xc5: return bin(u16());
      case 0xc6: return bin(u32());
      case 0xca: v = view.getFloat32(pos); pos += 4; return v;
      case 0xcb: v = view.getFloat64(pos); pos += 8; return v;
      case 0xcc: return u8();
      case 0xcd: return u16();
      case 0xce: return u32();
      case 0xcf: v = Number(view.getBigUint64(pos)); pos += 8; return v;
      case 0xd0: v = view.getInt8(pos); pos += 1; return v;
      case 0xd1: v = view.getInt16(pos); pos += 2; return v;
      case 0xd2: v = view.getInt32(pos); pos += 4; return v;
      case 0xd3: v = Number(view.getBigInt64(pos)); pos += 8; return v;
      case 0xd9: return str(u8());
      case 0xda: return str(u16());
      case 0xdb: return str(u32());
      case 0xdc: return arr(u16());
      case 0xdd: return arr(u32());
      case 0xde: return map(u16());
      case 0xdf: return map(u32());
      default: throw new Error("msgpack: unsupported type byte 0x" + b.toString(16));
    }
  }
  return read();
}

function msgpackEncode(value) {
  const out = [];
  function bytes(...bs) { for (const b of bs) out.push(b & 0xff); }
  function u16(n) { bytes(n >> 8, n); }
  function u32(n) { bytes(n >>> 24, n >>> 16, n >>> 8, n); }
  function write(v) {
    if (v === null || v === undefined) return bytes(0xc0);
    if (v === false) return bytes(0xc2);
    if (v === true) return bytes(0xc3);
    if (typeof v === "number") {
      if (Number.isInteger(v) && v >= 0 && v <= 0x7f) return bytes(v);
      if (Number.isInteger(v) && v < 0 && v >= -32) return bytes(0x100 + v);
      if (Number.isInteger(v) && v >= 0 && v <= 0xffffffff) { bytes(0xce); return u32(v); }
      const f = new DataView(new ArrayBuffer(8));
      f.setFloat64(0, v);
      bytes(0xcb);
      for (let i = 0; i < 8; i++) bytes(f.getUint8(i));
      return;
    }
    if (typeof v === "string") {
      const s = textEncoder.encode(v);
      if (s.length < 32) bytes(0xa0 | s.length); else if (s.length < 256) bytes(0xd9, s.length);
      else { bytes(0xda); u16(s.length); }
      for (const b of s) out.push(b);
      return;
    }
    if (Array.isArray(v)) {
      if (v.length < 16) bytes(0x90 | v.length); else { bytes(0xdc); u16(v.length); }
      v.forEach(write);
      return;
    }
    const keys = Object.keys(v);
    if (keys.length < 16) bytes(0x80 | keys.length); else { bytes(0xde); u16(keys.length); }
    for (const k of keys) { write(k); write(v[k]); }
  }
  write(value);
  return new Uint8Array(out);
}
