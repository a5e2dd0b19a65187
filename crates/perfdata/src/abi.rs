//! Numbers from the kernel's `perf_event.h` and perf's `header.h` / `event.h`.

/// `perf_event_header.type` values.
pub mod record_type {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const READ: u32 = 8;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const LOST_SAMPLES: u32 = 13;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const NAMESPACES: u32 = 16;
    pub const KSYMBOL: u32 = 17;
    pub const BPF_EVENT: u32 = 18;
    pub const CGROUP: u32 = 19;
    pub const TEXT_POKE: u32 = 20;
    pub const AUX_OUTPUT_HW_ID: u32 = 21;
    /// First type that perf itself synthesises (not from the kernel).
    pub const USER_TYPE_START: u32 = 64;
    pub const HEADER_ATTR: u32 = 64;
    pub const HEADER_EVENT_TYPE: u32 = 65;
    pub const HEADER_TRACING_DATA: u32 = 66;
    pub const HEADER_BUILD_ID: u32 = 67;
    pub const FINISHED_ROUND: u32 = 68;
    pub const ID_INDEX: u32 = 69;
    pub const AUXTRACE_INFO: u32 = 70;
    pub const AUXTRACE: u32 = 71;
    pub const AUXTRACE_ERROR: u32 = 72;
    pub const THREAD_MAP: u32 = 73;
    pub const CPU_MAP: u32 = 74;
    pub const STAT_CONFIG: u32 = 75;
    pub const STAT: u32 = 76;
    pub const STAT_ROUND: u32 = 77;
    pub const EVENT_UPDATE: u32 = 78;
    pub const TIME_CONV: u32 = 79;
    pub const HEADER_FEATURE: u32 = 80;
    pub const COMPRESSED: u32 = 81;
    pub const FINISHED_INIT: u32 = 82;
}

/// perf's name for a record type, as in `PERF_RECORD_<name>` and in the
/// "Aggregated stats" of `perf report -D`.
pub fn record_type_name(ty: u32) -> Option<&'static str> {
    use record_type::*;
    Some(match ty {
        MMAP => "MMAP",
        LOST => "LOST",
        COMM => "COMM",
        EXIT => "EXIT",
        THROTTLE => "THROTTLE",
        UNTHROTTLE => "UNTHROTTLE",
        FORK => "FORK",
        READ => "READ",
        SAMPLE => "SAMPLE",
        MMAP2 => "MMAP2",
        AUX => "AUX",
        ITRACE_START => "ITRACE_START",
        LOST_SAMPLES => "LOST_SAMPLES",
        SWITCH => "SWITCH",
        SWITCH_CPU_WIDE => "SWITCH_CPU_WIDE",
        NAMESPACES => "NAMESPACES",
        KSYMBOL => "KSYMBOL",
        BPF_EVENT => "BPF_EVENT",
        CGROUP => "CGROUP",
        TEXT_POKE => "TEXT_POKE",
        AUX_OUTPUT_HW_ID => "AUX_OUTPUT_HW_ID",
        HEADER_ATTR => "ATTR",
        HEADER_EVENT_TYPE => "EVENT_TYPE",
        HEADER_TRACING_DATA => "TRACING_DATA",
        HEADER_BUILD_ID => "BUILD_ID",
        FINISHED_ROUND => "FINISHED_ROUND",
        ID_INDEX => "ID_INDEX",
        AUXTRACE_INFO => "AUXTRACE_INFO",
        AUXTRACE => "AUXTRACE",
        AUXTRACE_ERROR => "AUXTRACE_ERROR",
        THREAD_MAP => "THREAD_MAP",
        CPU_MAP => "CPU_MAP",
        STAT_CONFIG => "STAT_CONFIG",
        STAT => "STAT",
        STAT_ROUND => "STAT_ROUND",
        EVENT_UPDATE => "EVENT_UPDATE",
        TIME_CONV => "TIME_CONV",
        HEADER_FEATURE => "FEATURE",
        COMPRESSED => "COMPRESSED",
        FINISHED_INIT => "FINISHED_INIT",
        _ => return None,
    })
}

/// `perf_event_header.misc` bits.
pub mod misc {
    pub const CPUMODE_MASK: u16 = 7;
    pub const CPUMODE_UNKNOWN: u16 = 0;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    pub const HYPERVISOR: u16 = 3;
    pub const GUEST_KERNEL: u16 = 4;
    pub const GUEST_USER: u16 = 5;
    /// MMAP/MMAP2: data mapping; COMM: exec; SWITCH: switch out.
    pub const MMAP_DATA: u16 = 1 << 13;
    pub const COMM_EXEC: u16 = 1 << 13;
    pub const SWITCH_OUT: u16 = 1 << 13;
    /// MMAP2 carries a build id instead of device/inode.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
    pub const EXACT_IP: u16 = 1 << 14;
    /// HEADER_BUILD_ID: the build id's size byte is valid.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// `perf_event_attr.sample_type` bits.
pub mod sample_type {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const REGS_USER: u64 = 1 << 12;
    pub const STACK_USER: u64 = 1 << 13;
    pub const WEIGHT: u64 = 1 << 14;
    pub const DATA_SRC: u64 = 1 << 15;
    pub const IDENTIFIER: u64 = 1 << 16;
    pub const TRANSACTION: u64 = 1 << 17;
    pub const REGS_INTR: u64 = 1 << 18;
    pub const PHYS_ADDR: u64 = 1 << 19;
    pub const AUX: u64 = 1 << 20;
    pub const CGROUP: u64 = 1 << 21;
    pub const DATA_PAGE_SIZE: u64 = 1 << 22;
    pub const CODE_PAGE_SIZE: u64 = 1 << 23;
    pub const WEIGHT_STRUCT: u64 = 1 << 24;
}

/// `perf_event_attr.read_format` bits.
pub mod read_format {
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    pub const ID: u64 = 1 << 2;
    pub const GROUP: u64 = 1 << 3;
    pub const LOST: u64 = 1 << 4;
}

/// Bits of the `perf_event_attr` flags word (the bitfield after `read_format`).
pub mod attr_flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const TASK: u64 = 1 << 13;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    pub const KSYMBOL: u64 = 1 << 29;
    pub const BPF_EVENT: u64 = 1 << 30;
    pub const TEXT_POKE: u64 = 1 << 33;
}

/// `perf_event_attr.branch_sample_type` bit that adds `hw_idx` to branch stacks.
pub const BRANCH_SAMPLE_HW_INDEX: u64 = 1 << 17;

/// Feature bits of the perf.data header (`HEADER_*` in perf's header.h).
pub mod feature {
    pub const TRACING_DATA: u32 = 1;
    pub const BUILD_ID: u32 = 2;
    pub const HOSTNAME: u32 = 3;
    pub const OSRELEASE: u32 = 4;
    pub const VERSION: u32 = 5;
    pub const ARCH: u32 = 6;
    pub const NRCPUS: u32 = 7;
    pub const CPUDESC: u32 = 8;
    pub const CPUID: u32 = 9;
    pub const TOTAL_MEM: u32 = 10;
    pub const CMDLINE: u32 = 11;
    pub const EVENT_DESC: u32 = 12;
    pub const CPU_TOPOLOGY: u32 = 13;
    pub const NUMA_TOPOLOGY: u32 = 14;
    pub const BRANCH_STACK: u32 = 15;
    pub const PMU_MAPPINGS: u32 = 16;
    pub const GROUP_DESC: u32 = 17;
    pub const AUXTRACE: u32 = 18;
    pub const STAT: u32 = 19;
    pub const CACHE: u32 = 20;
    pub const SAMPLE_TIME: u32 = 21;
    pub const MEM_TOPOLOGY: u32 = 22;
    pub const CLOCKID: u32 = 23;
    pub const DIR_FORMAT: u32 = 24;
    pub const BPF_PROG_INFO: u32 = 25;
    pub const BPF_BTF: u32 = 26;
    pub const COMPRESSED: u32 = 27;
    pub const CPU_PMU_CAPS: u32 = 28;
    pub const CLOCK_DATA: u32 = 29;
    pub const HYBRID_TOPOLOGY: u32 = 30;
    pub const PMU_CAPS: u32 = 31;
    /// Size of the feature bitmap in bits.
    pub const BITS: u32 = 256;
}

/// KSYMBOL types.
pub mod ksymbol_type {
    pub const UNKNOWN: u16 = 0;
    pub const BPF: u16 = 1;
    pub const OOL: u16 = 2;
}

/// KSYMBOL flag: the symbol goes away.
pub const KSYMBOL_FLAG_UNREGISTER: u16 = 1;

/// BPF_EVENT types.
pub mod bpf_event_type {
    pub const UNKNOWN: u16 = 0;
    pub const PROG_LOAD: u16 = 1;
    pub const PROG_UNLOAD: u16 = 2;
}

/// AUXTRACE_INFO types.
pub mod auxtrace_type {
    pub const INTEL_PT: u32 = 1;
    pub const INTEL_BTS: u32 = 2;
    pub const CS_ETM: u32 = 3;
    pub const ARM_SPE: u32 = 4;
    pub const S390_CPUMSF: u32 = 5;
}

/// AUX record flags.
pub mod aux_flag {
    pub const TRUNCATED: u64 = 0x01;
    pub const OVERWRITE: u64 = 0x02;
    pub const PARTIAL: u64 = 0x04;
    pub const COLLISION: u64 = 0x08;
}

/// CoreSight metadata magics (the first word of each per-CPU block).
pub mod cs_etm_magic {
    pub const ETMV3: u64 = 0x3030_3030_3030_3030;
    pub const ETMV4: u64 = 0x4040_4040_4040_4040;
    pub const ETE: u64 = 0x5050_5050_5050_5050;
}
