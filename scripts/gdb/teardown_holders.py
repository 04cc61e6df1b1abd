# gdb helper (source it in `gdb -p PID -batch -ex "source scripts/gdb/teardown_holders.py"`): for a
# process whose CAF actor-system teardown waits for a detached actor (`~actor_system` in
# `await_detached_threads`; actorflow logs "every actor ended, but CAF's actor-system teardown
# still waits"), names each waiting actor's type from its vtable, prints its control block (strong
# and weak reference counts precede the actor object by 64 bytes in CAF 0.17.6), and searches the
# process's writable memory for pointers to that control block, naming the object around each hit
# by the nearest vtable before it: who still holds the actor. Relies on CAF 0.17.6's layout of
# caf::detail::private_thread (the mutex at offset 0, the actor pointer at offset 96).
import gdb
out = []
for th in gdb.selected_inferior().threads():
    th.switch()
    f = gdb.newest_frame()
    mutex = None
    found = False
    while f is not None:
        name = f.name() or ""
        if "pthread_cond_wait" in name:
            try:
                mutex = int(f.read_var("mutex"))
            except Exception as e:
                pass
        if "await_self_destroyed" in name:
            found = True
            break
        f = f.older()
    if found and mutex:
        actor = int(gdb.parse_and_eval("*(long*)%d" % (mutex + 96)))
        vt = int(gdb.parse_and_eval("*(long*)%d" % actor))
        sym = gdb.execute("info symbol %d" % vt, to_string=True)
        # the actor control block precedes the actor object: strong/weak refs
        out.append("thread %d: private_thread %#x actor %#x vtable %s" % (th.num, mutex, actor, sym.strip()))
        for off in range(-64, 64, 8):
            try:
                v = int(gdb.parse_and_eval("*(long*)%d" % (actor + off)))
                out.append("  %+d: %#x" % (off, v))
            except Exception as e:
                out.append("  %+d: ?" % off)
print("\n".join(out))

import struct, re
def scan_holders(ctrl):
    inf = gdb.selected_inferior()
    pat = struct.pack("<Q", ctrl)
    pid = inf.pid
    hits = []
    for line in open("/proc/%d/maps" % pid):
        parts = line.split()
        rng, perms = parts[0], parts[1]
        if not perms.startswith("rw"): continue
        name = parts[5] if len(parts) > 5 else ""
        if name in ("[vvar]", "[vsyscall]"): continue
        lo, hi = [int(x, 16) for x in rng.split("-")]
        if hi - lo > (1 << 31): continue
        addr = lo
        while addr < hi and len(hits) < 2000:
            try:
                h = inf.search_memory(addr, hi - addr, pat)
            except Exception:
                break
            if h is None: break
            hits.append((h, name))
            addr = h + 8
    res = []
    for h, name in hits:
        desc = []
        for back in range(0, 200, 8):
            try:
                v = struct.unpack("<Q", bytes(inf.read_memory(h - back, 8)))[0]
                s = gdb.execute("info symbol %d" % v, to_string=True)
                if "vtable" in s or "typeinfo" in s:
                    desc.append("-%d: %s" % (back, s.strip()[:200]))
                    break
            except Exception:
                pass
        live = asan_live(h)
        if live is False:
            continue  # freed memory (in ASan's quarantine): not a holder
        res.append("holder at %#x (%s) %s" % (h, name, "; ".join(desc)))
        res.extend(asan_alloc_stack(h))
        if live:
            for off in range(-32, 48, 8):
                try:
                    v = struct.unpack("<Q", bytes(inf.read_memory(h + off, 8)))[0]
                    s = gdb.execute("info symbol %d" % v, to_string=True).strip()
                    if s.startswith("No symbol"): s = ""
                    res.append("    %+d: %#x %s" % (off, v, s[:160]))
                except Exception:
                    pass
    return res

def asan_live(addr):
    # Under ASan: False for an address in freed (poisoned) memory, True for a live one; None
    # without ASan.
    try:
        return int(gdb.parse_and_eval("(int)__asan_address_is_poisoned((void*)%d)" % addr)) == 0
    except Exception:
        return None

_buf = None
def asan_alloc_stack(addr):
    # Under ASan: the stack that allocated the heap chunk holding `addr` (who owns the holder).
    global _buf
    try:
        if _buf is None:
            _buf = int(gdb.parse_and_eval("(long)malloc(512)"))
        n = int(gdb.parse_and_eval("(long)__asan_get_alloc_stack((void*)%d, (void**)%d, 48, (int*)%d)" % (addr, _buf, _buf + 400)))
        lines = []
        for i in range(n):
            pc = int(gdb.parse_and_eval("*(long*)%d" % (_buf + 8 * i)))
            s = gdb.execute("info symbol %d" % pc, to_string=True).strip()
            lines.append("    alloc #%d %s" % (i, s[:220]))
        return lines
    except Exception as e:
        return ["    (no allocation stack: %s)" % e]

for line in list(out):
    m = re.search(r"actor (0x[0-9a-f]+)", line)
    if m:
        a = int(m.group(1), 16)
        print("\n".join(scan_holders(a - 64)))
