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
        while addr < hi and len(hits) < 40:
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
        res.append("holder at %#x (%s) %s" % (h, name, "; ".join(desc)))
    return res

for line in list(out):
    m = re.search(r"actor (0x[0-9a-f]+)", line)
    if m:
        a = int(m.group(1), 16)
        print("\n".join(scan_holders(a - 64)))
