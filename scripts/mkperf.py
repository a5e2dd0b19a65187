#!/usr/bin/env python3
"""Hand-craft small perf.data files to see what Linux perf 6.1 makes of them.

A research aid for the oracle tests (findings: scripts/PERF-FORMATS.md), not
part of the build. Usage:

    mkperf.py OUT [SCENARIO] [--features] [--kcore-dir]

SCENARIO is one of: all (default), textpoke, auxtrace, odd, misc.
--features adds a HOSTNAME/OSRELEASE/NRCPUS feature area (default: no feature
bit set at all). --kcore-dir makes OUT a perf.data directory
(OUT/data + OUT/kcore_dir/{kcore,kallsyms,modules}) whose kcore holds the
bytes the TEXT_POKE record pokes.
"""
import os
import struct
import sys

# --- record types -----------------------------------------------------------
MMAP, LOST, COMM, EXIT, THROTTLE, UNTHROTTLE, FORK = 1, 2, 3, 4, 5, 6, 7
SAMPLE, MMAP2, AUX, ITRACE_START, LOST_SAMPLES = 9, 10, 11, 12, 13
SWITCH, SWITCH_CPU_WIDE, KSYMBOL, BPF_EVENT, TEXT_POKE = 14, 15, 17, 18, 20
FINISHED_ROUND, ID_INDEX, AUXTRACE_INFO, AUXTRACE = 68, 69, 70, 71
TIME_CONV = 79

MISC_KERNEL, MISC_USER = 1, 2
MISC_SWITCH_OUT = 1 << 13
MISC_COMM_EXEC = 1 << 13
MISC_MMAP_DATA = 1 << 13
MISC_SWITCH_OUT_PREEMPT = 1 << 14
MISC_MMAP_BUILD_ID = 1 << 14

# --- perf_event_attr ----------------------------------------------------------
S_IP, S_TID, S_TIME, S_ADDR, S_ID, S_CPU, S_PERIOD = 1, 2, 4, 8, 64, 128, 256
S_IDENTIFIER = 1 << 16
F_DISABLED, F_MMAP, F_COMM, F_TASK, F_SAMPLE_ID_ALL = 1 << 0, 1 << 8, 1 << 9, 1 << 13, 1 << 18
F_MMAP2, F_COMM_EXEC, F_CONTEXT_SWITCH = 1 << 23, 1 << 24, 1 << 26
F_KSYMBOL, F_BPF_EVENT, F_TEXT_POKE = 1 << 29, 1 << 30, 1 << 33

ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7; perf 6.1 refuses bigger


def attr(type_, config, sample_type, flags, period=1):
    a = struct.pack("<IIQQQQQ", type_, ATTR_SIZE, config, period, sample_type, 0, flags)
    return a + bytes(ATTR_SIZE - len(a))


def pad8(b):
    return b + bytes(-len(b) % 8)


def cstr8(s):
    """NUL-terminated string padded with zeros to a multiple of 8."""
    return pad8(s.encode() + b"\0")


class Trailer:
    """sample_id for sample_type TID|TIME|CPU|IDENTIFIER (in kernel order)."""

    def __init__(self, ident):
        self.ident = ident

    def __call__(self, pid, tid, time, cpu):
        return struct.pack("<IIQIIQ", pid, tid, time, cpu, 0, self.ident)


def rec(type_, misc, body):
    size = 8 + len(body)
    assert size < 1 << 16
    return struct.pack("<IHH", type_, misc, size) + body


# --- scenarios ------------------------------------------------------------------
KADDR = 0xFFFFFFFF81000000
POKE_ADDR = KADDR + 0x1234
OOL_ADDR = 0xFFFFFFFFA0001000
NOP5 = bytes.fromhex("0f1f440000")
JMP5 = bytes.fromhex("e9f7000000")


def poke_body(addr, old, new):
    b = struct.pack("<QHH", addr, len(old), len(new)) + old + new
    # padding so that 4 + old_len + new_len is a multiple of 8
    return b + bytes(-(4 + len(old) + len(new)) % 8)


def ksym_body(addr, ln, ktype, flags, name):
    return struct.pack("<QIHH", addr, ln, ktype, flags) + cstr8(name)


def scenario_textpoke(sid):
    """COMM, KSYMBOL OOL, TEXT_POKEs, KSYMBOL BPF + BPF_EVENT, all timed."""
    t = 1_000_000_000
    r = []
    r.append(rec(MMAP, MISC_KERNEL, struct.pack("<iIQQQ", -1, 0, KADDR, 0x1000000, KADDR)
                 + cstr8("[kernel.kallsyms]_text") + sid(0, 0, 0, 0)))
    r.append(rec(COMM, 0, struct.pack("<II", 42, 43) + cstr8("poker") + sid(42, 43, t + 1, 1)))
    r.append(rec(KSYMBOL, 0, ksym_body(OOL_ADDR, 0x1000, 2, 0, "ftrace_trampoline") + sid(42, 43, t + 10, 1)))
    r.append(rec(TEXT_POKE, MISC_KERNEL, poke_body(POKE_ADDR, NOP5, JMP5) + sid(42, 43, t + 20, 1)))
    r.append(rec(TEXT_POKE, MISC_KERNEL, poke_body(OOL_ADDR, b"", bytes(range(0x90, 0x90 + 19)))
                 + sid(42, 43, t + 30, 0)))
    r.append(rec(TEXT_POKE, MISC_KERNEL, poke_body(OOL_ADDR, bytes(range(0x90, 0x90 + 19)), b"")
                 + sid(42, 43, t + 40, 0)))
    r.append(rec(KSYMBOL, 0, ksym_body(OOL_ADDR, 0x1000, 2, 1, "ftrace_trampoline") + sid(42, 43, t + 50, 0)))
    r.append(rec(KSYMBOL, 0, ksym_body(0xFFFFFFFFC0001000, 20, 1, 0, "bpf_prog_0123456789abcdef_x")
                 + sid(42, 43, t + 60, 1)))
    r.append(rec(BPF_EVENT, 0, struct.pack("<HHI", 1, 0, 7) + bytes.fromhex("0123456789abcdef")
                 + sid(42, 43, t + 61, 1)))
    r.append(rec(FINISHED_ROUND, 0, b""))
    return r


def scenario_all(sid):
    """Every record type perf 6.1 prints in `report -D` that this file can hold."""
    t = 2_000_000_000
    r = scenario_textpoke(sid)
    r.append(rec(MMAP2, MISC_USER, struct.pack("<IIQQQIIQQII", 42, 43, 0x400000, 0x1000, 0, 8, 1, 1234, 0, 5, 2)
                 + cstr8("/usr/bin/poker") + sid(42, 43, t + 1, 1)))
    r.append(rec(FORK, 0, struct.pack("<IIIIQ", 44, 42, 45, 43, t + 2) + sid(42, 43, t + 2, 1)))
    r.append(rec(EXIT, 0, struct.pack("<IIIIQ", 44, 42, 45, 43, t + 3) + sid(44, 45, t + 3, 1)))
    r.append(rec(LOST, 0, struct.pack("<QQ", sid.ident, 5) + sid(42, 43, t + 4, 1)))
    r.append(rec(LOST_SAMPLES, 0, struct.pack("<Q", 6) + sid(42, 43, t + 5, 1)))
    r.append(rec(THROTTLE, 0, struct.pack("<QQQ", t + 6, sid.ident, sid.ident) + sid(42, 43, t + 6, 1)))
    r.append(rec(UNTHROTTLE, 0, struct.pack("<QQQ", t + 7, sid.ident, sid.ident) + sid(42, 43, t + 7, 1)))
    r.append(rec(SWITCH, MISC_SWITCH_OUT, sid(42, 43, t + 8, 1)))
    r.append(rec(SWITCH, 0, sid(42, 43, t + 9, 1)))
    r.append(rec(SWITCH_CPU_WIDE, MISC_SWITCH_OUT, struct.pack("<II", 0, 0) + sid(42, 43, t + 10, 1)))
    r.append(rec(AUX, 0, struct.pack("<QQQ", 0, 0x100, 0) + sid(42, 43, t + 11, 1)))
    r.append(rec(ITRACE_START, 0, struct.pack("<II", 42, 43) + sid(42, 43, t + 12, 1)))
    # sample_type TID|TIME|CPU|IDENTIFIER: identifier comes first in a SAMPLE
    r.append(rec(SAMPLE, MISC_KERNEL, struct.pack("<QIIQII", sid.ident, 42, 43, t + 13, 1, 0)))
    r.append(rec(FINISHED_ROUND, 0, b""))
    return r


def scenario_misc(sid):
    """Printing variants: AUX flags, preempt switches, MMAP2 build id, MMAP data."""
    t = 4_000_000_000
    r = [rec(AUX, 0, struct.pack("<QQQ", 0x1000, 0x2000, f) + sid(1, 1, t + i, 0))
         for i, f in enumerate((1, 2, 4, 8, 0xF, 0x100))]
    r.append(rec(SWITCH_CPU_WIDE, MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, struct.pack("<II", 7, 8)
                 + sid(1, 1, t + 20, 0)))
    r.append(rec(SWITCH, MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, sid(1, 1, t + 21, 0)))
    build_id = bytes(range(20))
    r.append(rec(MMAP2, MISC_USER | MISC_MMAP_BUILD_ID, struct.pack("<IIQQQ", 1, 1, 0x400000, 0x1000, 0)
                 + bytes([20, 0, 0, 0]) + build_id + struct.pack("<II", 5, 2) + cstr8("/bin/x")
                 + sid(1, 1, t + 22, 0)))
    r.append(rec(MMAP, MISC_USER | MISC_MMAP_DATA, struct.pack("<IIQQQ", 1, 1, 0x500000, 0x1000, 0x3000)
                 + cstr8("/bin/data") + sid(1, 1, t + 23, 0)))
    r.append(rec(COMM, MISC_COMM_EXEC, struct.pack("<II", 1, 1) + cstr8("newname") + sid(1, 1, t + 24, 0)))
    r.append(rec(KSYMBOL, 0, ksym_body(0xFFFFFFFFC0002000, 64, 0, 0, "mystery") + sid(1, 1, t + 25, 0)))
    return r


def time_conv():
    return rec(TIME_CONV, 0, struct.pack("<QQQQQBB6x", 10, 1 << 10, 0, 0, 0, 1, 0))


def id_index(ident):
    return rec(ID_INDEX, 0, struct.pack("<QQQQQ", 1, ident, 0, 0, 0xFFFFFFFFFFFFFFFF))


# --- file ----------------------------------------------------------------------
HEADER_SIZE = 104
FEAT_HOSTNAME, FEAT_OSRELEASE, FEAT_NRCPUS, FEAT_AUXTRACE = 3, 4, 7, 18


def perf_string(s):
    b = pad8(s.encode() + b"\0")
    return struct.pack("<I", len(b)) + b


def build(attrs, records, features=None, auxtrace_offsets=None):
    """attrs: list of (attr bytes, [ids]); records: list of record bytes.

    Layout: header | ids arrays | attr section | data | feature index | payloads.
    """
    features = dict(features or {})
    out = bytearray(HEADER_SIZE)
    id_sections = []
    for _, ids in attrs:
        id_sections.append((len(out), 8 * len(ids)))
        out += b"".join(struct.pack("<Q", i) for i in ids)
    attrs_off = len(out)
    for (a, _), (ioff, isz) in zip(attrs, id_sections):
        out += a + struct.pack("<QQ", ioff, isz)
    data_off = len(out)
    data = b"".join(records)
    out += data
    if auxtrace_offsets is not None:
        features[FEAT_AUXTRACE] = struct.pack("<Q", len(auxtrace_offsets)) + b"".join(
            struct.pack("<QQ", data_off + o, 48) for o in auxtrace_offsets)
    bits = sorted(features)
    index_off = len(out)
    payload_off = index_off + 16 * len(bits)
    index, payloads = b"", b""
    for b in bits:
        index += struct.pack("<QQ", payload_off + len(payloads), len(features[b]))
        payloads += features[b]
    out += index + payloads
    bitmap = [0, 0, 0, 0]
    for b in bits:
        bitmap[b // 64] |= 1 << (b % 64)
    out[0:HEADER_SIZE] = b"PERFILE2" + struct.pack(
        "<QQQQQQQQ4Q", HEADER_SIZE, ATTR_SIZE + 16, attrs_off, len(attrs) * (ATTR_SIZE + 16),
        data_off, len(data), 0, 0, *bitmap)
    return bytes(out)


def std_features():
    return {FEAT_HOSTNAME: perf_string("mkperf"), FEAT_OSRELEASE: perf_string("6.1.0-mkperf"),
            FEAT_NRCPUS: struct.pack("<II", 2, 2)}


SIDEBAND_FLAGS = (F_DISABLED | F_MMAP | F_COMM | F_TASK | F_SAMPLE_ID_ALL | F_MMAP2 | F_COMM_EXEC
                  | F_KSYMBOL | F_BPF_EVENT | F_TEXT_POKE)
SID_TYPE = S_TID | S_TIME | S_CPU | S_IDENTIFIER


def make(scenario):
    ident = 100
    sid = Trailer(ident)
    dummy = attr(1, 9, SID_TYPE, SIDEBAND_FLAGS)  # PERF_TYPE_SOFTWARE / COUNT_SW_DUMMY
    attrs = [(dummy, [ident])]
    aux_offsets = None
    if scenario == "textpoke":
        records = scenario_textpoke(sid)
    elif scenario == "all":
        records = [id_index(ident), time_conv()] + scenario_all(sid)
    elif scenario == "auxtrace":
        # Intel PT: attr type 8 (= pmu_type below), an AUXTRACE_INFO and one
        # AUXTRACE buffer (PSB+PSBEND, zero-padded to 8 like perf's buffers).
        pt_ident = 200
        attrs.insert(0, (attr(8, 0x300e601, S_IP | SID_TYPE, F_DISABLED | F_SAMPLE_ID_ALL), [pt_ident]))
        # pmu_type, time_shift, time_mult, time_zero, cap_user_time_zero, tsc_bit,
        # noretcomp_bit, have_sched_switch, snapshot_mode, per_cpu_mmaps;
        # the *_bit entries are config masks (0x400 = config bit 10), not bit numbers
        priv = [8, 10, 1 << 10, 0, 1, 0x400, 0x800, 0, 0, 1]
        info = rec(AUXTRACE_INFO, 0, struct.pack("<II", 1, 0) + b"".join(struct.pack("<Q", p) for p in priv))
        trace = bytes.fromhex("0282" * 8) + bytes.fromhex("0223")
        trace = pad8(trace)
        head = rec(AUXTRACE, 0, struct.pack("<QQQIIII", len(trace), 0, 0x1234, 0, 43, 0, 0))
        records = [info] + scenario_textpoke(sid)
        aux_offsets = [sum(len(x) for x in records)]
        records += [head + trace, rec(FINISHED_ROUND, 0, b"")]
    elif scenario == "odd":
        # A poke where no symbol is known, then two records whose size is not
        # a multiple of 8: a TEXT_POKE whose lengths overrun the record and a
        # KSYMBOL whose name is not padded.
        t = 3_000_000_000
        records = [
            rec(MMAP, MISC_KERNEL, struct.pack("<iIQQQ", -1, 0, KADDR, 0x20000000, KADDR)
                + cstr8("[kernel.kallsyms]_text") + sid(0, 0, 0, 0)),
            rec(TEXT_POKE, MISC_KERNEL, poke_body(KADDR + 0x10000000, NOP5, JMP5) + sid(1, 1, t, 0)),
            rec(TEXT_POKE, MISC_KERNEL, struct.pack("<QHH", POKE_ADDR, 20, 20) + NOP5 + bytes(3)
                + sid(1, 1, t + 1, 0)),
            rec(KSYMBOL, 0, struct.pack("<QIHH", OOL_ADDR, 16, 2, 0) + b"odd\0" + sid(1, 1, t + 2, 0)),
        ]
    elif scenario == "misc":
        records = scenario_misc(sid)
    else:
        raise SystemExit("unknown scenario " + scenario)
    return attrs, records, aux_offsets


def kcore_elf(vaddr, code):
    """A minimal ELF64 core file with one PT_LOAD of `code` at `vaddr`."""
    ehdr_size, phdr_size = 64, 56
    off = ehdr_size + phdr_size
    ehdr = (b"\x7fELF\x02\x01\x01" + bytes(9)
            + struct.pack("<HHIQQQIHHHHHH", 4, 62, 1, 0, ehdr_size, 0, 0, ehdr_size, phdr_size, 1, 0, 0, 0))
    phdr = struct.pack("<IIQQQQQQ", 1, 7, off, vaddr, 0, len(code), len(code), 0x1000)
    return ehdr + phdr + code


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not args:
        raise SystemExit(__doc__)
    out = args[0]
    scenario = args[1] if len(args) > 1 else "all"
    attrs, records, aux = make(scenario)
    feats = std_features() if "--features" in argv else {}
    blob = build(attrs, records, feats, aux)
    if "--kcore-dir" in argv:
        os.makedirs(os.path.join(out, "kcore_dir"), exist_ok=True)
        code = bytearray(b"\x90" * 0x2000)
        code[0x1234:0x1239] = NOP5
        with open(os.path.join(out, "kcore_dir", "kcore"), "wb") as f:
            f.write(kcore_elf(KADDR, bytes(code)))
        with open(os.path.join(out, "kcore_dir", "kallsyms"), "w") as f:
            f.write("%x T _text\n%x T _stext\n%x T poke_me\n%x T _etext\n"
                    % (KADDR, KADDR, KADDR + 0x1200, KADDR + 0x2000))
        open(os.path.join(out, "kcore_dir", "modules"), "w").close()
        out = os.path.join(out, "data")
    with open(out, "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    main(sys.argv)
