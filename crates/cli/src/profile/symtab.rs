//! A binary's functions named as BOLT names them: symbol-table functions
//! (a local one as NAME/N), those without a size running to the next, and
//! PLT stubs as NAME@PLT.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget, SymbolKind};

/// A function of the binary: `[start, end)` at link-time addresses, and
/// its name as BOLT gives it.
#[derive(Clone, Debug)]
pub struct Function {
    pub start: u64,
    pub end: u64,
    pub name: String,
}

/// `file`'s functions, sorted by start, one per start.
pub fn functions(file: &object::File<'_>) -> Vec<Function> {
    let section_end = |s: &object::Symbol<'_, '_>| {
        let sec = s.section_index().and_then(|i| file.section_by_index(i).ok());
        sec.map_or(s.address(), |sec| sec.address() + sec.size())
    };
    // (start, end, name, local, end of its section)
    let mut symbols: Vec<(u64, u64, &str, bool, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| Some((s.address(), s.address() + s.size(), s.name().ok()?, s.is_local(), section_end(&s))))
        .collect();
    symbols.sort_by_key(|s| (s.0, s.2));
    symbols.dedup_by_key(|s| s.0);
    for i in 0..symbols.len() {
        if symbols[i].1 == symbols[i].0 {
            symbols[i].1 = symbols.get(i + 1).map_or(symbols[i].4, |n| n.0.min(symbols[i].4));
        }
    }
    // A local function is NAME/N, N counting the local functions of that name in address order.
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let mut functions: Vec<Function> = symbols
        .into_iter()
        .map(|(start, end, name, local, _)| {
            let name = if local {
                let n = seen.entry(name).or_default();
                *n += 1;
                format!("{name}/{n}")
            } else {
                name.to_string()
            };
            Function { start, end, name }
        })
        .collect();
    functions.extend(plt_stubs(file));
    functions.sort_by_key(|f| f.start);
    functions.dedup_by_key(|f| f.start);
    functions
}

/// The PLT stubs (.plt, .plt.sec, .plt.got): each `jmp *GOT(%rip)` whose
/// GOT slot a dynamic relocation names, as NAME@PLT over its entry.
fn plt_stubs(file: &object::File<'_>) -> Vec<Function> {
    let mut slots: HashMap<u64, String> = HashMap::new();
    if let (Some(relocs), Some(dynsym)) = (file.dynamic_relocations(), file.dynamic_symbol_table()) {
        for (at, r) in relocs {
            if let RelocationTarget::Symbol(i) = r.target() {
                if let Some(name) = dynsym.symbol_by_index(i).ok().and_then(|s| s.name().ok()) {
                    slots.insert(at, name.to_string());
                }
            }
        }
    }
    let mut stubs = Vec::new();
    for sec in file.sections() {
        let Ok(name) = sec.name() else { continue };
        let entry = match name {
            ".plt" | ".plt.sec" => 16,
            ".plt.got" => 8,
            _ => continue,
        };
        let (Ok(data), base) = (sec.data(), sec.address()) else { continue };
        let mut k = 0;
        while k + 6 <= data.len() {
            if data[k..k + 2] == [0xff, 0x25] {
                let disp = i32::from_le_bytes(data[k + 2..k + 6].try_into().unwrap_or_default());
                let slot = (base + k as u64 + 6).wrapping_add_signed(disp.into());
                if let Some(name) = slots.get(&slot) {
                    // An entry with ENDBR64 is 16 bytes wherever it is.
                    let size = if k >= 4 && data[k - 4..k] == [0xf3, 0x0f, 0x1e, 0xfa] { 16 } else { entry };
                    let start = base + (k as u64 / size) * size;
                    stubs.push(Function { start, end: start + size, name: format!("{name}@PLT") });
                }
                k += 6;
            } else {
                k += 1;
            }
        }
    }
    stubs
}
