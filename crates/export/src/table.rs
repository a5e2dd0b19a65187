//! Small tables written whole (pokes, KSYMBOL records, units).

use std::path::Path;

use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::file::AtomicFile;
use crate::settings::properties;
use crate::Error;

/// Writes `batch` to `path` whole (temporary name, then renamed).
pub fn write(path: &Path, batch: &RecordBatch) -> Result<(), Error> {
    let (file, out) = AtomicFile::create(path)?;
    let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(properties()))?;
    writer.write(batch)?;
    writer.close()?;
    file.commit()?;
    Ok(())
}
