// wgsl.js: the WGSL every kernel starts with -- its uniform arguments and operand accessors.
// Every storage binding is array<u32> (read_write: one binding per buffer may hold operands that
// are read and operands that are written, see program.js); f32 operands are bitcast on load and
// store (free on every GPU), so one window can also hold bytes (masks) and integers (indices).
//   ld_X(i) -> f32 / st_X(i, v)   element i of f32 operand X
//   ldu_X(i) -> u32               element i of a u32 / i32 operand (i32: bitcast<i32>)
//   ldb_X(i) -> u32               byte i of a u8 operand
//   ldi_X(i) -> u32               the low word of element i of an i64 operand (indices >= 0)
//   ld_X / st_X of an f64 operand: a float32 in its first word (the second is written 0)

/** The header: struct Params (u32 fields, f32 for those in floatFields), bindings, accessors. */
export function header(nbuf, fields, floatFields, bind) {
  const lines = ['struct Params {'];
  for (const f of fields) lines.push(`  ${f}: ${floatFields.has(f) ? 'f32' : 'u32'},`);
  lines.push('}', '@group(0) @binding(0) var<uniform> u: Params;');
  for (let i = 1; i <= nbuf; i++) lines.push(`@group(0) @binding(${i}) var<storage, read_write> b${i}: array<u32>;`);
  for (const { name: x, slot: s, type } of bind) {
    if (type === 'f32') {
      lines.push(`fn ld_${x}(i: u32) -> f32 { return bitcast<f32>(b${s}[u.o_${x} + i]); }`);
      lines.push(`fn st_${x}(i: u32, v: f32) { b${s}[u.o_${x} + i] = bitcast<u32>(v); }`);
    } else if (type === 'f64') {
      lines.push(`fn ld_${x}(i: u32) -> f32 { return bitcast<f32>(b${s}[u.o_${x} + 2u * i]); }`);
      lines.push(
        `fn st_${x}(i: u32, v: f32) { b${s}[u.o_${x} + 2u * i] = bitcast<u32>(v); b${s}[u.o_${x} + 2u * i + 1u] = 0u; }`,
      );
    } else if (type === 'i64') {
      lines.push(`fn ldi_${x}(i: u32) -> u32 { return b${s}[u.o_${x} + 2u * i]; }`);
    } else if (type === 'u8') {
      lines.push(
        `fn ldb_${x}(i: u32) -> u32 { let a = u.o_${x} + i; return (b${s}[a >> 2u] >> ((a & 3u) * 8u)) & 0xffu; }`,
      );
    } else {
      lines.push(`fn ldu_${x}(i: u32) -> u32 { return b${s}[u.o_${x} + i]; }`);
      lines.push(`fn stu_${x}(i: u32, v: u32) { b${s}[u.o_${x} + i] = v; }`);
    }
  }
  return lines.join('\n') + '\n';
}

/** Workgroups for n items of `per` each, as a 2-D grid when one dimension is not enough; the
 * kernel recovers the linear workgroup index with LINEAR_WG. */
export function grid1d(n, per, maxPerDim = 65535) {
  const groups = Math.ceil(n / per);
  if (groups <= maxPerDim) return [groups, 1, 1];
  const y = Math.ceil(groups / maxPerDim);
  return [Math.ceil(groups / y), y, 1];
}
export const LINEAR_WG = 'wid.y * nwg.x + wid.x';
