#!/usr/bin/env python3
"""Makes the lying indexes in this directory from plain/model.ckpt-7.index: its one data block handle
claims SIZE bytes (100 GB: handle_100g.index; 2^64-3: handle_wrap.index) under a valid index-block CRC.
Debian's leveldb::Table aborts (std::bad_alloc) on the first and crashes (SIGSEGV) on the second
(docs/interop.md); TfCheckpointTest.LyingBlockHandlesAreDataLoss checks actorflow's reader refuses both.

    python3 lie.py ../plain/model.ckpt-7.index handle_100g.index 100000000000
    python3 lie.py ../plain/model.ckpt-7.index handle_wrap.index 18446744073709551613
"""
import struct, sys
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xffffffff
def mask(c): return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def varint(v):
    out = b""
    while True:
        b = v & 0x7f; v >>= 7
        if v: out += bytes([b | 0x80])
        else: return out + bytes([b])
def get_varint(b, p):
    r = s = 0
    while True:
        x = b[p]; p += 1; r |= (x & 0x7f) << s; s += 7
        if not x & 0x80: return r, p
src = open(sys.argv[1], "rb").read()
footer = src[-48:]
mo, p = get_varint(footer, 0); ms, p = get_varint(footer, p); io, p = get_varint(footer, p); isz, p = get_varint(footer, p)
blk = src[io:io + isz]
# index block: one entry: shared=0, non_shared=k, value_len=v, key, value(handle)
q = 0; sh, q = get_varint(blk, q); ns, q = get_varint(blk, q); vl, q = get_varint(blk, q)
key = blk[q:q + ns]; q += ns
doff, r = get_varint(blk, q)
handle = varint(doff) + varint(int(sys.argv[3]))
entry = varint(0) + varint(ns) + varint(len(handle)) + key + handle
newblk = entry + struct.pack("<I", 0) + struct.pack("<I", 1)
trailer = b"\x00" + struct.pack("<I", mask(crc32c(newblk + b"\x00")))
out = src[:io] + newblk + trailer
nf = varint(mo) + varint(ms) + varint(io) + varint(len(newblk))
nf = nf + b"\x00" * (40 - len(nf)) + footer[40:]
open(sys.argv[2], "wb").write(out + nf)
