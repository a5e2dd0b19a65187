//! Small tables written whole (pokes, KSYMBOL records, units), and the
//! writer settings every file shares.

use std::path::Path;

use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::branches::ROW_GROUP;
use crate::file::AtomicFile;
use crate::Error;

/// zstd level 1 pages, row groups of [`ROW_GROUP`] rows.
pub(crate) fn properties() -> WriterProperties {
    let zstd = ZstdLevel::try_new(1).unwrap_or_default();
    WriterProperties::builder().set_compression(Compression::ZSTD(zstd)).set_max_row_group_size(ROW_GROUP).build()
}

/// Writes `batch` to `path` whole (temporary name, then renamed).
pub fn write(path: &Path, batch: &RecordBatch) -> Result<(), Error> {
    let (file, out) = AtomicFile::create(path)?;
    let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(properties()))?;
    writer.write(batch)?;
    writer.close()?;
    file.commit()?;
    Ok(())
}
