//! The `branches/` table: one row per decoded line, built column by column
//! and written a row group at a time.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanBuilder, Int32Builder, StringBuilder, StringDictionaryBuilder, UInt64Builder};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::file::AtomicFile;
use crate::settings::properties;
pub use crate::settings::ROW_GROUP;
use crate::Error;

/// One row: a branch, an instruction or an error (see the crate's doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchRow<'a> {
    pub time: u64,
    pub cpu: i32,
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub ip: Option<u64>,
    pub addr: Option<u64>,
    pub kind: &'a str,
    pub sym: Option<&'a str>,
    pub addr_sym: Option<&'a str>,
    pub insns: Option<u64>,
    pub uncertain: bool,
    pub error: Option<&'a str>,
}

/// The table's columns, in order.
pub fn schema() -> SchemaRef {
    let dict = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    Arc::new(Schema::new(vec![
        Field::new("time", DataType::UInt64, false),
        Field::new("cpu", DataType::Int32, false),
        Field::new("pid", DataType::Int32, true),
        Field::new("tid", DataType::Int32, true),
        Field::new("ip", DataType::UInt64, true),
        Field::new("addr", DataType::UInt64, true),
        Field::new("kind", dict(), false),
        Field::new("sym", dict(), true),
        Field::new("addr_sym", dict(), true),
        Field::new("insns", DataType::UInt64, true),
        Field::new("uncertain", DataType::Boolean, false),
        Field::new("error", DataType::Utf8, true),
    ]))
}

/// Columns being filled, one builder each.
struct Columns {
    time: UInt64Builder,
    cpu: Int32Builder,
    pid: Int32Builder,
    tid: Int32Builder,
    ip: UInt64Builder,
    addr: UInt64Builder,
    kind: StringDictionaryBuilder<Int32Type>,
    sym: StringDictionaryBuilder<Int32Type>,
    addr_sym: StringDictionaryBuilder<Int32Type>,
    insns: UInt64Builder,
    uncertain: BooleanBuilder,
    error: StringBuilder,
}

impl Columns {
    fn new() -> Self {
        let n = ROW_GROUP;
        Columns {
            time: UInt64Builder::with_capacity(n),
            cpu: Int32Builder::with_capacity(n),
            pid: Int32Builder::with_capacity(n),
            tid: Int32Builder::with_capacity(n),
            ip: UInt64Builder::with_capacity(n),
            addr: UInt64Builder::with_capacity(n),
            kind: StringDictionaryBuilder::new(),
            sym: StringDictionaryBuilder::new(),
            addr_sym: StringDictionaryBuilder::new(),
            insns: UInt64Builder::with_capacity(n),
            uncertain: BooleanBuilder::with_capacity(n),
            error: StringBuilder::new(),
        }
    }

    fn push(&mut self, r: &BranchRow<'_>) {
        self.time.append_value(r.time);
        self.cpu.append_value(r.cpu);
        self.pid.append_option(r.pid);
        self.tid.append_option(r.tid);
        self.ip.append_option(r.ip);
        self.addr.append_option(r.addr);
        self.kind.append_value(r.kind);
        self.sym.append_option(r.sym);
        self.addr_sym.append_option(r.addr_sym);
        self.insns.append_option(r.insns);
        self.uncertain.append_value(r.uncertain);
        self.error.append_option(r.error);
    }

    /// The rows so far as a batch; the builders start empty again.
    fn take(&mut self, schema: &SchemaRef) -> Result<RecordBatch, Error> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.time.finish()),
            Arc::new(self.cpu.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.tid.finish()),
            Arc::new(self.ip.finish()),
            Arc::new(self.addr.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.sym.finish()),
            Arc::new(self.addr_sym.finish()),
            Arc::new(self.insns.finish()),
            Arc::new(self.uncertain.finish()),
            Arc::new(self.error.finish()),
        ];
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// Writes one `branches/` file: rows in, a row group out every
/// [`ROW_GROUP`] rows; the file appears at [`BranchWriter::finish`] only.
pub struct BranchWriter {
    file: AtomicFile,
    writer: ArrowWriter<File>,
    schema: SchemaRef,
    columns: Columns,
    rows: usize,
    written: u64,
}

impl BranchWriter {
    pub fn create(path: &Path) -> Result<BranchWriter, Error> {
        let (file, out) = AtomicFile::create(path)?;
        let schema = schema();
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties()))?;
        Ok(BranchWriter { file, writer, schema, columns: Columns::new(), rows: 0, written: 0 })
    }

    pub fn push(&mut self, row: &BranchRow<'_>) -> Result<(), Error> {
        self.columns.push(row);
        self.rows += 1;
        if self.rows >= ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the rows so far as a row group.
    fn flush(&mut self) -> Result<(), Error> {
        if self.rows > 0 {
            let batch = self.columns.take(&self.schema)?;
            self.writer.write(&batch)?;
            self.writer.flush()?;
            self.written += self.rows as u64;
            self.rows = 0;
        }
        Ok(())
    }

    /// Writes what is left, closes the file and renames it into place; the rows written.
    pub fn finish(mut self) -> Result<u64, Error> {
        self.flush()?;
        self.writer.close()?;
        self.file.commit()?;
        Ok(self.written)
    }
}
