//! The writer settings every file shares.

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Rows a row group holds: the rows a writer keeps in memory at most.
pub const ROW_GROUP: usize = 64 * 1024;

/// zstd level 1 pages, row groups of [`ROW_GROUP`] rows.
pub(crate) fn properties() -> WriterProperties {
    let zstd = ZstdLevel::try_new(1).unwrap_or_default();
    WriterProperties::builder().set_compression(Compression::ZSTD(zstd)).set_max_row_group_size(ROW_GROUP).build()
}
