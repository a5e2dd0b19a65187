//! Kernel address -> `sym+0xoff`, from kallsyms plus the KSYMBOL records seen so far.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use perfdata::kcore::Kallsyms;
use perfdata::{Ksymbol, PerfFile};

/// Resolves kernel addresses the way perf prints them.
#[derive(Default)]
pub struct Symbolizer {
    kallsyms: Kallsyms,
    /// Code announced by KSYMBOL (OOL trampolines, BPF programs): start -> (end, name).
    dynamic: BTreeMap<u64, (u64, String)>,
    /// Where the symbols came from, for the report.
    pub source: String,
}

impl Symbolizer {
    /// Symbols from the input's kcore_dir/kallsyms, else `fallback`; never the host's /proc/kallsyms.
    pub fn for_input(file: &PerfFile, fallback: Option<&Path>) -> Result<Symbolizer> {
        let path = file.kcore_dir().map(|d| d.join("kallsyms")).filter(|p| p.is_file()).or(fallback.map(Path::to_path_buf));
        let Some(path) = path else {
            return Ok(Symbolizer { source: "none (no kcore_dir/kallsyms and no --kallsyms)".into(), ..Default::default() });
        };
        let (mut kallsyms, bad) = Kallsyms::load(&path).with_context(|| format!("reading symbols from {}", path.display()))?;
        // perf keeps only text, weak, data and bss symbols (symbol_type__filter).
        kallsyms = Kallsyms::from_symbols(
            kallsyms.symbols().iter().filter(|s| matches!(s.kind.to_ascii_uppercase(), 'T' | 'W' | 'D' | 'B')).cloned().collect(),
        );
        let mut source = path.display().to_string();
        if bad > 0 {
            source.push_str(&format!(" ({bad} malformed lines skipped)"));
        }
        Ok(Symbolizer { kallsyms, dynamic: BTreeMap::new(), source })
    }

    /// Applies a KSYMBOL record: registers or unregisters its range.
    pub fn apply(&mut self, k: &Ksymbol<'_>) {
        if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER != 0 {
            self.dynamic.remove(&k.addr);
        } else {
            let end = k.addr.saturating_add(k.len as u64);
            self.dynamic.insert(k.addr, (end, String::from_utf8_lossy(k.name).into_owned()));
        }
    }

    /// `name+0xoff`, or an empty string when nothing covers `addr`.
    pub fn describe(&self, addr: u64) -> String {
        if let Some((start, (end, name))) = self.dynamic.range(..=addr).next_back() {
            if addr < *end {
                return format!("{name}+{:#x}", addr - start);
            }
        }
        match self.kallsyms.lookup(addr) {
            Some((s, off)) => format!("{}+{off:#x}", s.name),
            None => String::new(),
        }
    }

    /// The bare symbol name covering `addr`, for kind rules that look at names.
    pub fn name(&self, addr: u64) -> Option<String> {
        let d = self.describe(addr);
        d.rsplit_once('+').map(|(n, _)| n.to_string())
    }
}
