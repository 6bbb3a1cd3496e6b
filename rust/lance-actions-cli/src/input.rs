//! Input files of every command (`keyed`, `graph`): JSON lines, Arrow IPC files and streams, and
//! Parquet (uncompressed, snappy, zstd or lz4; columns in the file's order).
//! One reader, so the same malformed file gets the same message whichever command reads it.
//! Lines and rows are counted from 1.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use lance::deps::arrow_array::RecordBatch;

use crate::{Failure, first_line};

/// How an input file is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    JsonLines,
    /// Arrow IPC file format (starts with `ARROW1`).
    ArrowFile,
    /// Arrow IPC stream format (`.arrows`, or starting with the 0xFFFFFFFF continuation marker).
    ArrowStream,
    /// Parquet (starts with `PAR1`).
    Parquet,
}

const FILE_MAGIC: &[u8] = b"ARROW1";
const STREAM_MARKER: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];
const PARQUET_MAGIC: &[u8] = b"PAR1";

impl Format {
    /// By the file's first bytes, then by its extension: the bytes win, so a file named `.arrow`
    /// that holds a stream is still read.
    pub fn of(path: &Path) -> Result<Format, Failure> {
        let head = first_bytes(path, 6)?;
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        Ok(if head.starts_with(FILE_MAGIC) {
            Format::ArrowFile
        } else if head.starts_with(PARQUET_MAGIC) || ext.as_deref() == Some("parquet") {
            Format::Parquet
        } else if head.starts_with(STREAM_MARKER) || matches!(ext.as_deref(), Some("arrow" | "arrows" | "ipc")) {
            Format::ArrowStream
        } else {
            Format::JsonLines
        })
    }

    /// Read as Arrow record batches (anything but JSON lines).
    pub fn is_batches(self) -> bool {
        self != Format::JsonLines
    }
}

fn first_bytes(path: &Path, n: u64) -> Result<Vec<u8>, Failure> {
    let mut head = Vec::new();
    open_file(path)?.take(n).read_to_end(&mut head).map_err(|e| input_error(path, e))?;
    Ok(head)
}

pub fn open_file(path: &Path) -> Result<File, Failure> {
    File::open(path).map_err(|e| input_error(path, e))
}

pub fn input_error(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::input(format!("{}: {}", path.display(), first_line(&e.to_string())))
}

/// Every batch of an Arrow IPC file or stream, or of a Parquet file.
pub fn read_batches(path: &Path, format: Format) -> Result<Vec<RecordBatch>, Failure> {
    match format {
        Format::Parquet => read_parquet(path),
        _ => read_arrow(path, format),
    }
}

fn read_arrow(path: &Path, format: Format) -> Result<Vec<RecordBatch>, Failure> {
    let bad = |e: lance::deps::arrow_schema::ArrowError| {
        Failure::input(format!("{} is not readable as Arrow IPC: {}", path.display(), first_line(&e.to_string())))
    };
    let batches: Result<Vec<RecordBatch>, _> = match format {
        Format::ArrowFile => {
            arrow_ipc::reader::FileReader::try_new_buffered(open_file(path)?, None).map_err(bad)?.collect()
        }
        _ => arrow_ipc::reader::StreamReader::try_new_buffered(open_file(path)?, None).map_err(bad)?.collect(),
    };
    batches.map_err(bad)
}

fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>, Failure> {
    let bad = |e: &dyn std::fmt::Display| {
        Failure::input(format!("{} is not readable as Parquet: {}", path.display(), first_line(&e.to_string())))
    };
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open_file(path)?)
        .and_then(|b| b.build())
        .map_err(|e| bad(&e))?;
    reader.collect::<Result<Vec<_>, _>>().map_err(|e| bad(&e))
}

/// One record of a JSON-lines file: its line number (from 1) and its object.
pub type JsonRecord = (usize, serde_json::Map<String, serde_json::Value>);

/// The JSON objects of a JSON-lines file with their line numbers (from 1); blank lines are
/// skipped. A line that is not one JSON object is refused, naming its line.
pub fn json_lines(path: &Path) -> Result<Vec<JsonRecord>, Failure> {
    let mut out = Vec::new();
    for (i, line) in BufReader::new(open_file(path)?).lines().enumerate() {
        let line = line.map_err(|e| input_error(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let refuse = |why: String| Failure::input(format!("{}: line {}: {why}", path.display(), i + 1));
        match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(serde_json::Value::Object(object)) => out.push((i + 1, object)),
            Ok(other) => return Err(refuse(format!("not a JSON object: {other}"))),
            Err(e) => return Err(refuse(format!("not a JSON object: {e}"))),
        }
    }
    Ok(out)
}

/// The field names of a JSON-lines file in the order they first appear (serde_json's map sorts
/// them, and so does arrow-json's schema inference): the columns of a table created from the file
/// keep the file's order.
pub fn json_field_order(path: &Path) -> Result<Vec<String>, Failure> {
    let mut order: Vec<String> = Vec::new();
    for (i, line) in BufReader::new(open_file(path)?).lines().enumerate() {
        let line = line.map_err(|e| input_error(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let keys: KeysInOrder = serde_json::from_str(&line)
            .map_err(|e| Failure::input(format!("{}: line {}: not a JSON object: {e}", path.display(), i + 1)))?;
        for key in keys.0 {
            if !order.contains(&key) {
                order.push(key);
            }
        }
    }
    Ok(order)
}

/// The keys of one JSON object, in the order written; the values are skipped unread.
struct KeysInOrder(Vec<String>);

impl<'de> serde::Deserialize<'de> for KeysInOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = KeysInOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<KeysInOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(KeysInOrder(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_decided_by_the_bytes_first_then_the_extension() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).expect("write");
            p
        };
        assert_eq!(Format::of(&write("a.bin", b"ARROW1\0\0")).ok(), Some(Format::ArrowFile));
        assert_eq!(Format::of(&write("a.arrow", &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0])).ok(), Some(Format::ArrowStream));
        assert_eq!(Format::of(&write("a.arrows", b"")).ok(), Some(Format::ArrowStream));
        assert_eq!(Format::of(&write("a.jsonl", b"{}")).ok(), Some(Format::JsonLines));
        assert_eq!(Format::of(&write("a.bin", b"PAR1\0\0")).ok(), Some(Format::Parquet));
    }

    #[test]
    fn json_lines_name_the_line_of_a_bad_record_counting_from_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("rows.jsonl");
        std::fs::write(&p, "{\"id\": 1}\n\n[1, 2]\n").expect("write");
        let Err(Failure::Message { message, .. }) = json_lines(&p) else { panic!("refused") };
        assert!(message.ends_with("line 3: not a JSON object: [1,2]"), "{message}");
    }

    #[test]
    fn json_field_order_is_the_order_of_first_appearance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("rows.jsonl");
        std::fs::write(&p, "{\"zeta\": 1, \"id\": {\"a\": 2}}\n{\"alpha\": 3, \"id\": 4}\n").expect("write");
        assert_eq!(json_field_order(&p).ok(), Some(vec!["zeta".to_string(), "id".into(), "alpha".into()]));
    }
}
