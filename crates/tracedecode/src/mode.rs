//! Which code image the decoders walk (`decode --image`, and the modes `check` scores).

use serde::Serialize;

/// Which code the decoder walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ImageMode {
    /// The code before any change (no poke awareness).
    Static,
    /// One image updated in timestamp order, read at the last timestamp seen (what perf does).
    #[cfg_attr(feature = "clap", value(name = "perf"))]
    PerfStyle,
    /// The code timeline, read over the interval the trace allows.
    Timeline,
}

impl ImageMode {
    pub const ALL: [ImageMode; 3] = [ImageMode::Static, ImageMode::PerfStyle, ImageMode::Timeline];

    /// The mode's name in reports (`check`'s table).
    pub fn name(self) -> &'static str {
        match self {
            ImageMode::Static => "static",
            ImageMode::PerfStyle => "perf-style",
            ImageMode::Timeline => "timeline",
        }
    }
}
