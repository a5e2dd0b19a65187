//! Reading OpenCSD snapshot descriptions: the six real snapshots, and
//! broken ones that must fail with the file and line.

mod common;

use std::path::{Path, PathBuf};

use etm::snapshot::{BufferFormat, Snapshot};
use etm::{Container, Framing, Profile};

fn tmp(name: &str) -> PathBuf {
    testkit::scratch!("etm-snapshot", name)
}

#[test]
fn juno_r1_1_six_etms_and_an_stm() {
    let Some(dir) = common::snapshot("juno_r1_1") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    assert_eq!(s.devices.len(), 13);
    assert_eq!(s.devices.iter().filter(|d| d.class == "core").count(), 6);
    assert_eq!(s.devices.iter().filter(|d| d.is_etmv4()).count(), 6);
    assert_eq!(
        s.buffers.iter().map(|b| (b.name.as_str(), &b.format)).collect::<Vec<_>>(),
        [("ETB_0", &BufferFormat::Coresight), ("ETB_1", &BufferFormat::Coresight)]
    );
    let cpu = s.device("cpu_4").unwrap();
    assert_eq!(cpu.kind, "Cortex-A57");
    assert_eq!(cpu.register("PC"), Some(0xFFFF_FFC0_0008_1000));
    assert_eq!(cpu.dumps[0].file, dir.join("kernel_dump.bin"));
    assert_eq!((cpu.dumps[0].address, cpu.dumps[0].length), (0xFFFF_FFC0_0008_1000, Some(0x50000)));
    assert_eq!(s.core_of("ETM_4").unwrap().name, "cpu_4");
    let setup = s.buffer_setup("ETB_0").unwrap();
    assert_eq!((setup.framing, setup.container), (Framing::Aligned { reset_on_4x_fsync: false }, Container::Plain));
    let ids: Vec<u8> = setup.sources.iter().map(|s| s.1.trace_id()).collect();
    assert_eq!(ids, [0x10, 0x11, 0x12, 0x13, 0x14, 0x15]);
    assert!(setup.sources.iter().all(|s| s.1.configr == 0xC1 && s.1.profile == Profile::A));
    let stm = s.buffer_setup("ETB_1").unwrap();
    assert!(stm.sources.is_empty());
    assert_eq!(stm.unsupported, [("STM_12".to_string(), "STM".to_string())]);
}

#[test]
fn register_and_dump_forms_of_every_snapshot() {
    let Some(dir) = common::snapshot("a57_single_step") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    let etm = s.device("CSETM_0").unwrap();
    assert_eq!(etm.kind, "ETM4.1");
    let acvr = etm.registers.iter().find(|r| r.name == "TRCACVR1").unwrap();
    assert_eq!((acvr.id, acvr.size, acvr.value), (Some(0x102), Some(64), 0));
    assert_eq!(etm.register("trctraceidr"), Some(0x10));
    let cfg = s.etm_config(etm).unwrap();
    assert_eq!((cfg.version(), cfg.vmid_bytes(), cfg.context_id_bytes()), (0x41, 4, 4));

    let Some(dir) = common::snapshot("a55-test-tpiu") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    let core = s.device("Cortex-A55_0").unwrap();
    assert_eq!(core.dumps[0].space.as_deref(), Some("EL2"));
    assert_eq!(core.register("X9"), Some(u64::MAX));
    let setup = s.buffer_setup("DSTREAM_0").unwrap();
    assert_eq!((setup.framing, setup.container), (Framing::Synced { hsyncs: false }, Container::Dstream));

    let Some(dir) = common::snapshot("init-short-addr") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    let setup = s.buffer_setup("CSTMC_TRACE_FIFO").unwrap();
    assert_eq!(setup.framing, Framing::Raw { trace_id: 0 });
    assert_eq!(setup.sources[0].1.version(), 0x44);

    let Some(dir) = common::snapshot("bugfix-exact-match") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    assert_eq!(s.clusters[1], ("Cluster 1".to_string(), vec!["cpu_0".to_string(), "cpu_3".to_string(), "cpu_4".to_string(), "cpu_5".to_string()]));
    let dumps = &s.device("cpu_2").unwrap().dumps;
    assert_eq!(dumps.len(), 5);
    assert_eq!((dumps[1].address, dumps[1].length), (0x400200, None));
    assert_eq!(s.buffer_setup("etr_0").unwrap().sources.len(), 6);

    // Dumps whose files are missing upstream are described all the same.
    let Some(dir) = common::snapshot("juno-uname-001") else {
        return;
    };
    let s = Snapshot::load(&dir).unwrap();
    let dumps = &s.device("cpu_0").unwrap().dumps;
    assert_eq!(dumps.len(), 4);
    assert!(!dumps[1].file.exists());
    assert_eq!(dumps[1].length, Some(0x12F88C));
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

const SNAPSHOT_INI: &str = "[snapshot]\nversion=1.0\n[device_list]\ndevice0=cpu.ini\ndevice1=etm.ini\n[trace]\nmetadata=trace.ini\n";
const CPU_INI: &str = "[device]\nname=cpu\nclass=core\ntype=Cortex-M33\n";
const TRACE_INI: &str =
    "[trace_buffers]\nbuffers=buffer0\n[buffer0]\nname=b\nfile=t.bin\nformat=coresight\n[source_buffers]\netm=b\n[core_trace_sources]\ncpu=etm\n";

#[test]
fn broken_descriptions_name_the_file_and_line() {
    let etm = "[device]\nname=etm\nclass=trace_source\ntype=ETM4\n[regs]\nTRCCONFIGR=0x1\nTRCTRACEIDR=0x10\nTRCIDR0=0x28000EA1\nTRCIDR2=0x488\n";
    let d = tmp("good");
    write(&d, &[("snapshot.ini", SNAPSHOT_INI), ("cpu.ini", CPU_INI), ("etm.ini", etm), ("trace.ini", TRACE_INI)]);
    let s = Snapshot::load(&d).unwrap();
    let setup = s.buffer_setup("b").unwrap();
    assert_eq!(setup.sources[0].1.profile, Profile::M);
    assert_eq!(setup.sources[0].1.idr1, 0x4100F403, "OpenCSD's default TRCIDR1");

    let cases: [(&str, &str, &str); 5] = [
        ("etm.ini", "[device\nname=etm\n", "etm.ini:1: unterminated section header"),
        ("etm.ini", "[device]\nname etm\n", "etm.ini:2: expected key=value"),
        ("etm.ini", "name=etm\n", "etm.ini:1: key=value before any [section]"),
        ("etm.ini", "[device]\nname=etm\n[regs]\nTRCCONFIGR=0xZZ\n", "etm.ini:4: bad value"),
        ("etm.ini", "[device]\nname=etm\n[dump1]\naddress=0x1000\n", "[dump1]: no file="),
    ];
    for (i, (file, text, want)) in cases.iter().enumerate() {
        let d = tmp(&format!("bad{i}"));
        write(&d, &[("snapshot.ini", SNAPSHOT_INI), ("cpu.ini", CPU_INI), ("etm.ini", etm), ("trace.ini", TRACE_INI)]);
        write(&d, &[(file, text)]);
        let err = Snapshot::load(&d).unwrap_err().to_string();
        assert!(err.contains(want), "case {i}: {err}");
    }

    // A source without a register OpenCSD needs; a device file that is not there.
    let d = tmp("noreg");
    write(&d, &[("snapshot.ini", SNAPSHOT_INI), ("cpu.ini", CPU_INI), ("etm.ini", &etm.replace("TRCIDR2=0x488\n", "")), ("trace.ini", TRACE_INI)]);
    let err = Snapshot::load(&d).unwrap().buffer_setup("b").unwrap_err().to_string();
    assert!(err.contains("has no TRCIDR2"), "{err}");
    // A device file that is not there is skipped with a word (trc_pkt_lister
    // does the same); a trace source that is then missing is listed, not decoded.
    let d = tmp("nofile");
    write(&d, &[("snapshot.ini", SNAPSHOT_INI), ("etm.ini", etm), ("trace.ini", TRACE_INI)]);
    let s = Snapshot::load(&d).unwrap();
    assert_eq!(s.skipped_devices.len(), 1);
    assert!(s.skipped_devices[0].contains("cpu.ini"), "{:?}", s.skipped_devices);
    let d = tmp("nosource");
    write(&d, &[("snapshot.ini", SNAPSHOT_INI), ("cpu.ini", CPU_INI), ("trace.ini", TRACE_INI)]);
    let setup = Snapshot::load(&d).unwrap().buffer_setup("b").unwrap();
    assert_eq!(setup.missing, vec!["etm".to_string()]);
    assert!(setup.sources.is_empty());
}

/// The memory dumps become one code image: dumps several cores share are
/// loaded once, each at its address.
#[test]
fn memory_dumps_make_the_code_image() {
    use codeimage::Read;
    let Some(juno) = common::snapshot("juno_r1_1") else {
        return;
    };
    let (code, notes) = Snapshot::load(&juno).unwrap().code_image();
    assert!(notes.is_empty(), "{notes:?}");
    let dump = std::fs::read(juno.join("kernel_dump.bin")).unwrap();
    assert_eq!(code.base().regions().len(), 1, "six cores share one dump: {:?}", code.base().regions());
    assert_eq!(code.read(0xFFFF_FFC0_0008_1000, 16, 0), Read::Exact(dump[..16].to_vec()));
    assert!(matches!(code.read(0xFFFF_FFC0_0008_1000 + dump.len() as u64, 4, 0), Read::Unmapped { .. }));

    let Some(cc1) = common::snapshot("bugfix-exact-match") else {
        return;
    };
    let (code, notes) = Snapshot::load(&cc1).unwrap().code_image();
    assert!(notes.is_empty(), "{notes:?}");
    let text = std::fs::read(cc1.join("cc1.text_dump.bin")).unwrap();
    assert_eq!(code.base().regions().len(), 5);
    assert_eq!(code.read(0x400200 + 0x1000, 8, 0), Read::Exact(text[0x1000..0x1008].to_vec()));
}

/// A dump whose address is not a number is an error naming the file and line.
#[test]
fn a_bad_dump_address_names_the_file_and_line() {
    let d = tmp("baddump");
    let cpu = format!("{CPU_INI}\n[dump1]\nfile=x.bin\naddress=zzz\n");
    write(&d, &[("snapshot.ini", "[device_list]\ndevice0=cpu.ini\n"), ("cpu.ini", &cpu)]);
    let err = Snapshot::load(&d).unwrap_err().to_string();
    assert!(err.contains("cpu.ini:") && err.contains("zzz"), "{err}");
}

/// 20,000 `[dumpN]` sections of one 64 KiB file, each one byte above the last:
/// loaded in bounded time and memory, the overlaps counted in a note.
#[test]
fn many_overlapping_dumps_are_counted() {
    let d = tmp("overlapping-dumps");
    let n = 20_000u64;
    let mut cpu = String::from(CPU_INI);
    for i in 0..n {
        cpu.push_str(&format!("[dump{i}]\nfile=mem.bin\naddress={:#x}\n", 0x10000 + i));
    }
    write(&d, &[("snapshot.ini", "[device_list]\ndevice0=cpu.ini\n"), ("cpu.ini", &cpu)]);
    let bytes: Vec<u8> = (0..1u32 << 16).map(|i| i as u8).collect();
    std::fs::write(d.join("mem.bin"), &bytes).unwrap();
    let s = Snapshot::load(&d).unwrap();
    let (code, notes) = s.code_image();
    assert_eq!(code.base().overlap_count, n - 1);
    assert!(notes.iter().any(|n| n.starts_with("19999 overlapping ranges")), "{notes:?}");
    assert_eq!(code.read(0x10000 + 7, 1, 0), codeimage::Read::Exact(vec![7]));
}
