//! What `decode` and `export` read of a perf.data before decoding, each
//! part read once: symbols (kallsyms, user mappings, KSYMBOL names by time),
//! the decoder's kernel idioms, and the code image with its timeline.

use std::collections::HashSet;

use anyhow::Result;
use codeimage::{BaseImage, CodeTimeline, PerfTimeline, PokeEvents, Sideband, UserCode};
use isa::KernelIdioms;
use perfdata::PerfFile;
use tracedecode::{setup, ImageMode};

use crate::symbols::{InputKallsyms, Symbolizer};

/// The input read, ready to decode over.
pub struct Prepared {
    pub symbols: Symbolizer,
    pub idioms: KernelIdioms,
    /// The code before any change, alone (`--image static` only).
    pub bare: Option<CodeTimeline>,
    /// The code under its pokes, and what the side-band could not give.
    pub built: PerfTimeline,
    /// Records the input could not read that the side-band pass did not
    /// report already.
    pub unsaid: Vec<String>,
}

impl Prepared {
    /// Reads it all; `command` names the messages said on stderr
    /// (records refused or unreadable, each once).
    pub fn read(file: &PerfFile, image: ImageMode, user: &UserCode, bad_records: &[perfdata::Error], command: &str) -> Result<Prepared> {
        let kallsyms = InputKallsyms::read(file, None)?;
        let mut symbols = Symbolizer::of_kallsyms(kallsyms.as_ref());
        let idioms = kallsyms.as_ref().map_or_else(Default::default, |k| setup::idioms_of(&k.symbols));
        drop(kallsyms);
        let sideband = Sideband::read(file, PokeEvents::Single);
        symbols.add_user_mappings(&sideband.mappings, user);
        let mut base = BaseImage::new();
        if let Some(refused) = codeimage::add_base_mapped(file, &sideband.mappings, &mut base, user)?.summary() {
            eprintln!("poketrace {command}: {refused}");
        }
        symbols.set_kernel_code(base.regions().iter().map(|r| r.start..r.end()), &sideband.ksymbols);
        for (time, k) in &sideband.ksymbol_records {
            symbols.apply_at(k, *time);
        }
        let bare = (image == ImageMode::Static).then(|| codeimage::TimelineBuilder::new(base.clone()).build());
        let built = sideband.timeline(base);
        // The records codeimage could not read are those the input could not: each said once.
        let said: HashSet<&str> = built.errors.iter().map(String::as_str).collect();
        let unsaid: Vec<String> = bad_records.iter().map(ToString::to_string).filter(|e| !said.contains(e.as_str())).collect();
        for e in built.errors.iter().chain(&unsaid) {
            eprintln!("poketrace {command}: {e}");
        }
        Ok(Prepared { symbols, idioms, bare, built, unsaid })
    }
}
