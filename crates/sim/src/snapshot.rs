//! An OpenCSD trace snapshot of an AArch64 run ("ARM Trace and Debug
//! Snapshot file format 0v2"): per CPU a core (Cortex-A53, the base kernel
//! image as its memory dump) and an ETMv4 source with the registers of
//! [`crate::etm::config`]; one buffer of CoreSight frames that all sources
//! share, each CPU's frames after the previous CPU's. `trc_pkt_lister
//! -ss_dir DIR -decode` decodes it; the memory is the code before any poke.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::program::Program;
use crate::SimError;

pub fn write(dir: &Path, cpus: u32, prog: &Program, spools: &[(PathBuf, Vec<u64>)]) -> Result<(), SimError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SimError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let put = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io(&p))
    };
    let mut list = String::new();
    for c in 0..cpus {
        let _ = writeln!(list, "device{}=cpu_{c}.ini", 2 * c);
        let _ = writeln!(list, "device{}=ETM_{c}.ini", 2 * c + 1);
    }
    put("snapshot.ini", &format!("[snapshot]\nversion=1.0\n\n[device_list]\n{list}\n[trace]\nmetadata=trace.ini\n"))?;
    let kernel = dir.join("kernel.bin");
    std::fs::write(&kernel, &prog.text).map_err(io(&kernel))?;
    for c in 0..cpus {
        put(
            &format!("cpu_{c}.ini"),
            &format!(
                "[device]\nname=cpu_{c}\nclass=core\ntype=Cortex-A53\n\n[regs]\nPC(size:64)={:#x}\nSP(size:64)=0\nSCTLR_EL1=0x1007\nCPSR=0x3C5\n\n[dump1]\nfile=kernel.bin\naddress={:#x}\nlength={:#x}\n",
                prog.entry,
                prog.text_base,
                prog.text.len()
            ),
        )?;
        let r = crate::etm::config(c);
        put(
            &format!("ETM_{c}.ini"),
            &format!(
                "[device]\nname=ETM_{c}\nclass=trace_source\ntype=ETM4\n\n[regs]\nTRCCONFIGR(0x004)={:#010x}\nTRCTRACEIDR(0x010)={:#010x}\nTRCAUTHSTATUS(0x3EE)={:#010x}\nTRCIDR0(0x078)={:#010x}\nTRCIDR1(0x079)={:#010x}\nTRCIDR2(0x07A)={:#010x}\nTRCIDR8(0x060)={:#010x}\nTRCIDR9(0x061)={:#010x}\nTRCIDR10(0x062)={:#010x}\nTRCIDR11(0x063)={:#010x}\nTRCIDR12(0x064)={:#010x}\nTRCIDR13(0x065)={:#010x}\n",
                r.configr,
                r.traceidr,
                crate::etm::TRCAUTHSTATUS,
                r.idr0,
                r.idr1,
                r.idr2,
                r.idr8,
                r.idr9,
                r.idr10,
                r.idr11,
                r.idr12,
                r.idr13
            ),
        )?;
    }
    let mut sources = String::new();
    let mut cores = String::new();
    for c in 0..cpus {
        let _ = writeln!(sources, "ETM_{c}=ETB_0");
        let _ = writeln!(cores, "cpu_{c}=ETM_{c}");
    }
    put(
        "trace.ini",
        &format!("[trace_buffers]\nbuffers=buffer0\n\n[buffer0]\nname=ETB_0\nfile=trace.bin\nformat=coresight\n\n[source_buffers]\n{sources}\n[core_trace_sources]\n{cores}"),
    )?;
    // The buffer: every CPU's frames, one CPU after the other.
    let buffer = dir.join("trace.bin");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&buffer).map_err(io(&buffer))?);
    for (path, _) in spools {
        let mut f = std::fs::File::open(path).map_err(io(path))?;
        std::io::copy(&mut f, &mut out).map_err(io(&buffer))?;
    }
    std::io::Write::flush(&mut out).map_err(io(&buffer))?;
    Ok(())
}
