//! What `decode` and `export` read of a perf.data before decoding, each
//! part read once: the input and its side-band in one pass over the records,
//! then symbols (kallsyms, user mappings, KSYMBOL names by time), the
//! decoder's kernel idioms, and the code image with its timeline.

use anyhow::Result;
use codeimage::{BaseImage, CodeTimeline, PerfTimeline, PokeEvents, Sideband, SidebandReader, UserCode};
use isa::KernelIdioms;
use perfdata::{PerfFile, Record};
use tracedecode::{setup, ImageMode, Input};

use crate::symbols::{InputKallsyms, Symbolizer};

/// The input read, ready to decode over.
pub struct Prepared {
    pub symbols: Symbolizer,
    pub idioms: KernelIdioms,
    /// The code before any change, alone (`--image static` only).
    pub bare: Option<CodeTimeline>,
    /// The code under its pokes, and what the side-band could not give
    /// (its errors include every record that could not be read).
    pub built: PerfTimeline,
}

/// The input and its side-band, from one pass over the file's records;
/// `also` sees every record that could be read in time order, after the side-band.
pub fn read_input<'f>(file: &'f PerfFile, mut also: impl FnMut(&Record<'f>)) -> Result<(Input<'f>, Sideband<'f>)> {
    let mut side = SidebandReader::new(file, PokeEvents::Single);
    let input = Input::read_sorted(file, |r| {
        side.observe(r);
        also(r);
    })?;
    let sideband = side.finish(input.bad_records.iter().map(ToString::to_string).collect());
    Ok((input, sideband))
}

impl Prepared {
    /// Reads the rest over `sideband`; `command` names the messages said on
    /// stderr (records refused or unreadable, each once).
    pub fn read(file: &PerfFile, sideband: Sideband<'_>, image: ImageMode, user: &UserCode, command: &str) -> Result<Prepared> {
        let kallsyms = InputKallsyms::read(file, None)?;
        let mut symbols = Symbolizer::of_kallsyms(kallsyms.as_ref());
        let idioms = kallsyms.as_ref().map_or_else(Default::default, |k| setup::idioms_of(&k.symbols));
        drop(kallsyms);
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
        for e in &built.errors {
            eprintln!("poketrace {command}: {e}");
        }
        Ok(Prepared { symbols, idioms, bare, built })
    }
}
