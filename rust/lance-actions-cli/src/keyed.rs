//! `keyed`: keyed tables from the command line. Create from JSON lines or Arrow IPC, strict insert,
//! upsert, update and delete by key through the commit driver, and all-branch key migration.
//!
//! A key conflict prints the conflicting keys and exits with [`KEY_CONFLICT_EXIT`]; nothing was
//! written. Every other failure is one line on stderr and exit 1.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use lance::deps::arrow_array::RecordBatch;
use lance::deps::arrow_schema::{DataType, Schema, SchemaRef};
use lance_actions_keyed::migrate::BranchStep;
use lance_actions_keyed::{ConflictCause, Error, KeySample, KeyedTable, MigrationReport, WriteOutcome, migrate};
use serde_json::json;

use crate::{Failure, first_line};

/// Exit code of a write refused for a key conflict.
pub const KEY_CONFLICT_EXIT: u8 = 3;

#[derive(Subcommand)]
pub enum KeyedCommand {
    /// Create a keyed table from JSON lines or an Arrow IPC file (schema from the file).
    Create {
        uri: String,
        /// A key column; repeat for a composite key, in key order.
        #[arg(long = "key", required = true)]
        key: Vec<String>,
        /// JSON lines, or Arrow IPC (`.arrow`/`.ipc`, or any file starting with `ARROW1`).
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Strict insert: every key must be new, or nothing is written (exit 3).
    Insert(WriteArgs),
    /// Insert new keys, update present ones.
    Upsert(WriteArgs),
    /// Update rows whose keys are present; a missing key writes nothing.
    Update(WriteArgs),
    /// Delete the rows with the given keys (the input needs only the key columns).
    Delete(WriteArgs),
    /// Install a primary key on an existing table, main and every branch, then stamp it.
    Migrate {
        uri: String,
        /// A key column; repeat for a composite key, in key order.
        #[arg(long = "key", required = true)]
        key: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct WriteArgs {
    uri: String,
    /// JSON lines, or Arrow IPC (`.arrow`/`.ipc`, or any file starting with `ARROW1`).
    #[arg(long)]
    input: PathBuf,
    /// Write to this branch (its `branch create` name) instead of main.
    #[arg(long)]
    branch: Option<String>,
    /// `--branch` names a physical Lance branch (as `branch list` shows it), not a logical one.
    #[arg(long, requires = "branch")]
    physical: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy)]
enum WriteKind {
    Insert,
    Upsert,
    Update,
    Delete,
}

impl WriteKind {
    fn label(self) -> &'static str {
        match self {
            WriteKind::Insert => "insert",
            WriteKind::Upsert => "upsert",
            WriteKind::Update => "update",
            WriteKind::Delete => "delete",
        }
    }
}

pub async fn run(command: KeyedCommand) -> Result<(), Failure> {
    match command {
        KeyedCommand::Create { uri, key, input, json } => create(&uri, &key, &input, json).await,
        KeyedCommand::Insert(args) => write(WriteKind::Insert, args).await,
        KeyedCommand::Upsert(args) => write(WriteKind::Upsert, args).await,
        KeyedCommand::Update(args) => write(WriteKind::Update, args).await,
        KeyedCommand::Delete(args) => write(WriteKind::Delete, args).await,
        KeyedCommand::Migrate { uri, key, json } => run_migrate(&uri, &key, json).await,
    }
}

async fn create(uri: &str, key: &[String], input: &Path, as_json: bool) -> Result<(), Failure> {
    let batches = match Format::of(input)? {
        Format::Ipc => read_ipc(input)?,
        Format::JsonLines => read_json(input, infer_json(input)?, true)?,
    };
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let names: Vec<&str> = key.iter().map(String::as_str).collect();
    let table = KeyedTable::create(uri, batches, &names).await.map_err(|e| failure(e, key, as_json))?;
    let version = table.dataset().manifest().version;
    if as_json {
        println!("{}", json!({"op": "create", "uri": uri, "key": key, "rows": rows, "version": version}));
    } else {
        println!("created keyed table {uri} on key {key:?}: {rows} row(s) at v{version}");
    }
    Ok(())
}

async fn write(kind: WriteKind, args: WriteArgs) -> Result<(), Failure> {
    let mut table = open_table(&args.uri, args.branch.as_deref(), args.physical).await?;
    let key = table.key().names.clone();
    let batches = read_rows(kind, &table, &args.input)?;
    let result = match kind {
        WriteKind::Insert => table.insert(batches).await,
        WriteKind::Upsert => table.upsert(batches).await,
        WriteKind::Update => table.update(batches).await,
        WriteKind::Delete => table.delete(batches).await,
    };
    let outcome = result.map_err(|e| failure(e, &key, args.json))?;
    print_outcome(kind, &args, &outcome);
    Ok(())
}

async fn open_table(uri: &str, branch: Option<&str>, physical: bool) -> Result<KeyedTable, Failure> {
    require_path(uri)?;
    let table = match branch {
        None => KeyedTable::open(uri).await,
        Some(b) if physical => KeyedTable::open_physical_branch(uri, b).await,
        Some(b) => KeyedTable::open_branch(uri, b).await,
    };
    table.map_err(|e| Failure::Message(first_line(&e.to_string()).to_string()))
}

/// A local path that does not exist is one clear line, not Lance's object-store error.
fn require_path(uri: &str) -> Result<(), Failure> {
    if !uri.contains("://") && !Path::new(uri).exists() {
        return Err(Failure::Message(format!("{uri}: no such path")));
    }
    Ok(())
}

/// The rows a write takes. JSON lines are decoded with the table's schema (a delete needs only
/// the key columns); Arrow IPC is taken as it is and checked by the table.
fn read_rows(kind: WriteKind, table: &KeyedTable, input: &Path) -> Result<Vec<RecordBatch>, Failure> {
    let batches = match (Format::of(input)?, kind) {
        (Format::Ipc, _) => read_ipc(input)?,
        (Format::JsonLines, WriteKind::Delete) => read_json(input, key_schema(table)?, false)?,
        (Format::JsonLines, _) => read_json(input, table.arrow_schema().clone(), true)?,
    };
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Err(Failure::Message(format!("{}: no rows", input.display())));
    }
    Ok(batches)
}

/// The table's schema cut down to its key fields, in key order.
fn key_schema(table: &KeyedTable) -> Result<SchemaRef, Failure> {
    let schema = table.arrow_schema();
    let fields = table
        .key()
        .names
        .iter()
        .map(|name| {
            schema
                .field_with_name(name)
                .cloned()
                .map_err(|_| Failure::Message(format!("the table has no key field '{name}'")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

enum Format {
    Ipc,
    JsonLines,
}

impl Format {
    /// Arrow IPC by extension (`.arrow`, `.ipc`) or by the `ARROW1` magic; JSON lines otherwise.
    fn of(path: &Path) -> Result<Format, Failure> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        if matches!(ext.as_deref(), Some("arrow" | "ipc")) || starts_with_magic(path)? {
            Ok(Format::Ipc)
        } else {
            Ok(Format::JsonLines)
        }
    }
}

fn starts_with_magic(path: &Path) -> Result<bool, Failure> {
    let mut head = Vec::with_capacity(6);
    open_file(path)?.take(6).read_to_end(&mut head).map_err(|e| input_error(path, e))?;
    Ok(head == b"ARROW1")
}

fn open_file(path: &Path) -> Result<File, Failure> {
    File::open(path).map_err(|e| input_error(path, e))
}

fn input_error(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::Message(format!("{}: {}", path.display(), first_line(&e.to_string())))
}

/// An Arrow IPC file; a stream (no `ARROW1` magic) is read as a stream.
fn read_ipc(path: &Path) -> Result<Vec<RecordBatch>, Failure> {
    let bad = |e| {
        Failure::Message(format!("{} is not readable as Arrow IPC: {}", path.display(), first_line(&format!("{e}"))))
    };
    let batches: Result<Vec<_>, _> = if starts_with_magic(path)? {
        arrow_ipc::reader::FileReader::try_new_buffered(open_file(path)?, None).map_err(bad)?.collect()
    } else {
        arrow_ipc::reader::StreamReader::try_new_buffered(open_file(path)?, None).map_err(bad)?.collect()
    };
    batches.map_err(bad)
}

/// The schema of a JSON-lines file, from all its records (integers as Int64, strings as Utf8).
fn infer_json(path: &Path) -> Result<SchemaRef, Failure> {
    let reader = BufReader::new(open_file(path)?);
    let (schema, _) = arrow_json::reader::infer_json_schema_from_seekable(reader, None).map_err(|e| {
        Failure::Message(format!("{} is not JSON lines: {}", path.display(), first_line(&e.to_string())))
    })?;
    Ok(Arc::new(schema))
}

/// Decode JSON lines with `schema`. `strict`: a field the schema lacks is an error. A value that
/// does not fit its column's type is refused first, naming its row.
fn read_json(path: &Path, schema: SchemaRef, strict: bool) -> Result<Vec<RecordBatch>, Failure> {
    check_json_values(path, &schema)?;
    let bad = |e: lance::deps::arrow_schema::ArrowError| {
        Failure::Message(format!("{} does not fit the table: {}", path.display(), first_line(&e.to_string())))
    };
    let reader = arrow_json::ReaderBuilder::new(schema.clone())
        .with_strict_mode(strict)
        .build(BufReader::new(open_file(path)?))
        .map_err(bad)?;
    let mut batches = reader.collect::<Result<Vec<_>, _>>().map_err(bad)?;
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    Ok(batches)
}

/// arrow-json converts what it can: `9.5` in an integer column becomes 9 and `"13"` becomes 13. A
/// value that does not fit its column exactly is refused here instead, with its row (counted from 1,
/// one JSON object per line) and column, before anything is written.
fn check_json_values(path: &Path, schema: &Schema) -> Result<(), Failure> {
    let refuse = |row: usize, what: String| Failure::Message(format!("{}: row {row}: {what}", path.display()));
    let mut row = 0;
    for line in BufReader::new(open_file(path)?).lines() {
        let line = line.map_err(|e| input_error(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        row += 1;
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| refuse(row, format!("not a JSON object: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(refuse(row, "not a JSON object".into()));
        };
        for field in schema.fields() {
            if let Some(v) = object.get(field.name())
                && !fits(v, field.data_type())
            {
                return Err(refuse(
                    row,
                    format!(
                        "{v} does not fit column '{}' of type {}; nothing was written",
                        field.name(),
                        field.data_type()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Does JSON value `v` fit type `t` without rounding, truncation or parsing a string? Null is left
/// to the table (which knows nullability); types outside the scalar ones are left to arrow-json.
fn fits(v: &serde_json::Value, t: &DataType) -> bool {
    use serde_json::Value;
    let signed = |n: &serde_json::Number| n.as_i64();
    let unsigned = |n: &serde_json::Number| n.as_u64();
    match (v, t) {
        (Value::Null, _) => true,
        (Value::Number(n), DataType::Int8) => signed(n).is_some_and(|i| i8::try_from(i).is_ok()),
        (Value::Number(n), DataType::Int16) => signed(n).is_some_and(|i| i16::try_from(i).is_ok()),
        (Value::Number(n), DataType::Int32) => signed(n).is_some_and(|i| i32::try_from(i).is_ok()),
        (Value::Number(n), DataType::Int64) => signed(n).is_some(),
        (Value::Number(n), DataType::UInt8) => unsigned(n).is_some_and(|u| u8::try_from(u).is_ok()),
        (Value::Number(n), DataType::UInt16) => unsigned(n).is_some_and(|u| u16::try_from(u).is_ok()),
        (Value::Number(n), DataType::UInt32) => unsigned(n).is_some_and(|u| u32::try_from(u).is_ok()),
        (Value::Number(n), DataType::UInt64) => unsigned(n).is_some(),
        (Value::Number(_), DataType::Float16 | DataType::Float32 | DataType::Float64) => true,
        (Value::String(_), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => true,
        (Value::Bool(_), DataType::Boolean) => true,
        (
            _,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Boolean,
        ) => false,
        _ => true,
    }
}

fn print_outcome(kind: WriteKind, args: &WriteArgs, o: &WriteOutcome) {
    let branch = args.branch.as_deref().unwrap_or("main");
    if args.json {
        println!(
            "{}",
            json!({
                "op": kind.label(), "uri": args.uri, "branch": branch,
                "inserted": o.inserted, "updated": o.updated, "deleted": o.deleted,
                "version": o.version, "attempts": o.attempts, "commits": o.commits.len(),
            })
        );
    } else {
        println!(
            "{} {} ({branch}): inserted {}, updated {}, deleted {} row(s) at v{} in {} attempt(s)",
            kind.label(),
            args.uri,
            o.inserted,
            o.updated,
            o.deleted,
            o.version,
            o.attempts
        );
    }
}

/// A library error as the CLI reports it: key conflicts in full (exit 3), the rest in one line.
fn failure(e: Error, key: &[String], as_json: bool) -> Failure {
    match e {
        Error::KeyConflict { keys, cause } => {
            report_conflict(&keys, cause, key, as_json);
            Failure::Reported { code: KEY_CONFLICT_EXIT }
        }
        other => Failure::Message(first_line(&other.to_string()).to_string()),
    }
}

fn cause_code(cause: ConflictCause) -> &'static str {
    match cause {
        ConflictCause::AlreadyPresent => "already_present",
        ConflictCause::DuplicateInBatch => "duplicate_in_batch",
        ConflictCause::InsertedConcurrently => "inserted_concurrently",
    }
}

/// The conflicting keys: JSON on stdout, or a small table on stderr.
fn report_conflict(keys: &KeySample, cause: ConflictCause, key: &[String], as_json: bool) {
    if as_json {
        println!(
            "{}",
            json!({
                "error": "key_conflict", "cause": cause_code(cause), "key": key,
                "keys": keys.first, "count": keys.count,
                "message": format!("{} key(s) {cause}; nothing was written", keys.count),
            })
        );
        return;
    }
    eprintln!("error: key conflict: {} key(s) {cause}; nothing was written", keys.count);
    let header = key.join(", ");
    eprintln!("  {header}");
    eprintln!("  {}", "-".repeat(header.len().max(3)));
    for k in &keys.first {
        eprintln!("  {k}");
    }
    if keys.count > keys.first.len() {
        eprintln!("  ... and {} more", keys.count - keys.first.len());
    }
    eprintln!("  {} conflicting key(s), cause: {cause}", keys.count);
}

async fn run_migrate(uri: &str, key: &[String], as_json: bool) -> Result<(), Failure> {
    require_path(uri)?;
    let names: Vec<&str> = key.iter().map(String::as_str).collect();
    let report = migrate(uri, &names).await.map_err(|e| Failure::Message(first_line(&e.to_string()).to_string()))?;
    if as_json {
        println!("{}", migration_json(uri, &report));
    } else {
        print_migration(uri, &report);
    }
    Ok(())
}

fn migration_json(uri: &str, report: &MigrationReport) -> serde_json::Value {
    let branches: Vec<_> = report
        .branches
        .iter()
        .map(|b| match b.step {
            BranchStep::AlreadyKeyed => json!({"branch": b.branch, "rows": b.rows, "step": "already_keyed"}),
            BranchStep::Installed { version } => {
                json!({"branch": b.branch, "rows": b.rows, "step": "installed", "version": version})
            }
        })
        .collect();
    json!({"uri": uri, "key": report.key, "branches": branches, "stamped": report.stamped})
}

fn print_migration(uri: &str, report: &MigrationReport) {
    println!("migrate {uri} to key {:?}", report.key);
    for b in &report.branches {
        match b.step {
            BranchStep::AlreadyKeyed => println!("  {}: already keyed, {} row(s)", b.branch, b.rows),
            BranchStep::Installed { version } => {
                println!("  {}: installed at v{version}, {} row(s)", b.branch, b.rows)
            }
        }
    }
    if report.stamped {
        println!("fencing stamp: written");
    } else {
        println!("fencing stamp: already present");
    }
}
