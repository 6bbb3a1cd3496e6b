//! `keyed`: keyed tables from the command line. Create from JSON lines, Arrow IPC or Parquet, strict insert,
//! upsert, update and delete by key through the commit driver, and all-branch key migration.
//!
//! A key conflict prints the conflicting keys and exits with [`KEY_CONFLICT_EXIT`]; nothing was
//! written. Every other failure is one line on stderr and exit 1.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use lance::deps::arrow_array::RecordBatch;
use lance::deps::arrow_schema::{DataType, Schema, SchemaRef};
use lance_actions_keyed::migrate::BranchStep;
use lance_actions_keyed::{
    ConflictCause, Error, KeySample, KeyedTable, MigrationReport, WriteOptions, WriteOutcome, migrate_with_progress,
};
use serde_json::json;

use crate::conflicts::{LogicalNames, display_branch};
use crate::input::{Format, json_field_order, json_lines, open_file, read_batches};
use crate::progress::Activity;
use crate::{Failure, JSON_HELP, Kind, URI_HELP, first_line};

/// The help text of `--input`.
pub const INPUT_HELP: &str = "The rows: JSON lines (one object per line), Arrow IPC file (.arrow) or stream \
     (.arrows), or Parquet, told apart by their first bytes";

/// Exit code of a write refused for a key conflict.
pub const KEY_CONFLICT_EXIT: u8 = 3;

#[derive(Subcommand)]
pub enum KeyedCommand {
    /// Create a keyed table from JSON lines, Arrow IPC or Parquet (schema from the file).
    Create {
        /// Where to create the table (a local path or an object-store URI); nothing may be there.
        uri: String,
        /// A key column; repeat for a composite key, in key order.
        #[arg(long = "key", required = true)]
        key: Vec<String>,
        #[arg(long, value_name = "FILE", help = INPUT_HELP)]
        input: PathBuf,
        #[arg(long, help = JSON_HELP)]
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
        #[arg(help = URI_HELP)]
        uri: String,
        /// A key column; repeat for a composite key, in key order.
        #[arg(long = "key", required = true)]
        key: Vec<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Args)]
pub struct WriteArgs {
    #[arg(help = URI_HELP)]
    uri: String,
    #[arg(long, value_name = "FILE", help = INPUT_HELP)]
    input: PathBuf,
    /// Write to this branch (its `branch create` name) instead of main.
    #[arg(long)]
    branch: Option<String>,
    /// `--branch` names a physical Lance branch (as `branch list` shows it), not a logical one.
    #[arg(long, requires = "branch")]
    physical: bool,
    #[arg(long, help = JSON_HELP)]
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
        Format::JsonLines => read_json(input, infer_json(input)?, true)?,
        batches => read_batches(input, batches)?,
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
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let on = args.branch.as_deref().unwrap_or("main");
    let activity = Activity::start(format!("{} {rows} row(s) on {on}", kind.label()), args.json);
    table = table.with_options(WriteOptions { progress: activity.progress(), ..WriteOptions::default() });
    let result = match kind {
        WriteKind::Insert => table.insert(batches).await,
        WriteKind::Upsert => table.upsert(batches).await,
        WriteKind::Update => table.update(batches).await,
        WriteKind::Delete => table.delete(batches).await,
    };
    drop(activity);
    let outcome = result.map_err(|e| failure(e, &key, args.json))?;
    print_outcome(kind, &args, &outcome);
    Ok(())
}

async fn open_table(uri: &str, branch: Option<&str>, physical: bool) -> Result<KeyedTable, Failure> {
    // Opened as every command opens a table first, so a wrong path is worded the same everywhere.
    crate::open(uri).await?;
    let table = match branch {
        None => KeyedTable::open(uri).await,
        Some(b) if physical => KeyedTable::open_physical_branch(uri, b).await,
        Some(b) => KeyedTable::open_branch(uri, b).await,
    };
    table.map_err(library_failure)
}

/// The rows a write takes. JSON lines are decoded with the table's schema (a delete needs only
/// the key columns); Arrow IPC is taken as it is and checked by the table.
fn read_rows(kind: WriteKind, table: &KeyedTable, input: &Path) -> Result<Vec<RecordBatch>, Failure> {
    let batches = match (Format::of(input)?, kind) {
        (Format::JsonLines, WriteKind::Delete) => read_json(input, key_schema(table)?, false)?,
        (Format::JsonLines, _) => read_json(input, table.arrow_schema().clone(), true)?,
        (batches, _) => read_batches(input, batches)?,
    };
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Err(Failure::input(format!("{}: no rows", input.display())));
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
                .map_err(|_| Failure::new(Kind::Other, format!("the table has no key field '{name}'")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// The schema of a JSON-lines file, from all its records (integers as Int64, strings as Utf8).
fn infer_json(path: &Path) -> Result<SchemaRef, Failure> {
    // A malformed line is refused by the shared reader first, in the words every command uses.
    json_lines(path)?;
    let reader = BufReader::new(open_file(path)?);
    let (schema, _) = arrow_json::reader::infer_json_schema_from_seekable(reader, None)
        .map_err(|e| Failure::input(format!("{} is not JSON lines: {}", path.display(), first_line(&e.to_string()))))?;
    // Inference sorts the fields by name; the table's columns keep the file's order instead.
    let order = json_field_order(path)?;
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.sort_by_key(|f| order.iter().position(|name| name == f.name()).unwrap_or(usize::MAX));
    Ok(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// Decode JSON lines with `schema`. `strict`: a field the schema lacks is an error. A value that
/// does not fit its column's type is refused first, naming its row.
fn read_json(path: &Path, schema: SchemaRef, strict: bool) -> Result<Vec<RecordBatch>, Failure> {
    check_json_values(path, &schema)?;
    let bad = |e: lance::deps::arrow_schema::ArrowError| {
        Failure::input(format!("{} does not fit the table: {}", path.display(), first_line(&e.to_string())))
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
/// value that does not fit its column exactly is refused here instead, with its line (lines are
/// counted from 1) and column, before anything is written. So is a line with no value for a column
/// that cannot be null (every key column), which arrow-json reports as an unmasked null.
fn check_json_values(path: &Path, schema: &Schema) -> Result<(), Failure> {
    for (line, object) in json_lines(path)? {
        for field in schema.fields() {
            if !field.is_nullable() && object.get(field.name()).is_none_or(serde_json::Value::is_null) {
                return Err(Failure::input(format!(
                    "{}: line {line}: no value for column '{}', which cannot be null (no key column can); nothing was written",
                    path.display(),
                    field.name()
                )));
            }
            if let Some(v) = object.get(field.name())
                && !fits(v, field.data_type())
            {
                return Err(Failure::input(format!(
                    "{}: line {line}: {v} does not fit column '{}' of type {}; nothing was written",
                    path.display(),
                    field.name(),
                    field.data_type()
                )));
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

/// "1 commit", "13 commits", or "nothing to commit".
fn commits_phrase(n: usize) -> String {
    match n {
        0 => "nothing to commit".into(),
        1 => "1 commit".into(),
        n => format!("{n} commits"),
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
        // Commits are what happened to the table; attempts beyond them were re-executions after
        // other writers landed first, worth saying only when there were some.
        let retried = o.attempts.saturating_sub(o.commits.len());
        let retried =
            if retried > 0 { format!(" ({retried} re-executed after other writers landed)") } else { String::new() };
        println!(
            "{} {} ({branch}): inserted {}, updated {}, deleted {} row(s) at v{} in {}{retried}",
            kind.label(),
            args.uri,
            o.inserted,
            o.updated,
            o.deleted,
            o.version,
            commits_phrase(o.commits.len())
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
        other => library_failure(other),
    }
}

/// Any other library error in one line, with the kind its exit code follows.
fn library_failure(e: Error) -> Failure {
    let kind = match &e {
        Error::Commit { source } => commit_kind(source),
        Error::Contention { .. } | Error::AddressesOutdated { .. } | Error::SchemaChanged { .. } => Kind::Retry,
        Error::NullKey { .. } | Error::Input { .. } | Error::UnsupportedKeyType { .. } => Kind::Input,
        Error::Branch { source: lance_actions_commit::branch_names::BranchError::NoSuchBranch { .. } } => {
            Kind::NoSuchBranch
        }
        _ => Kind::Other,
    };
    Failure::new(kind, first_line(&e.to_string()))
}

/// A commit the driver gave up on: retry (4) when re-executing may go through, fail (5) when not.
pub fn commit_kind(e: &lance_actions_commit::CommitError) -> Kind {
    use lance_actions_commit::CommitError;
    match e {
        CommitError::Retry { .. } | CommitError::RetriesExhausted { .. } => Kind::Retry,
        CommitError::Fail { .. } => Kind::Fail,
        _ => Kind::Other,
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
    let message = conflict_message(keys, cause, key);
    if as_json {
        // The error object every command prints, with the keys as data.
        let error = json!({
            "kind": "key_conflict", "message": message, "cause": cause_code(cause), "key": key,
            "keys": keys.first, "count": keys.count,
        });
        println!("{}", json!({"error": error}));
        return;
    }
    eprintln!("error: {message}");
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

/// "key 3 already present; nothing was written", naming the key column and the keys shown.
fn conflict_message(keys: &KeySample, cause: ConflictCause, key: &[String]) -> String {
    let column = key.join(", ");
    let shown = keys.first.join(", ");
    let more = if keys.count > keys.first.len() {
        format!(" and {} more", keys.count - keys.first.len())
    } else {
        String::new()
    };
    if keys.count == 1 {
        format!("key conflict: {column} {shown} {cause}; nothing was written")
    } else {
        format!("key conflict: {} keys {cause} ({column} {shown}{more}); nothing was written", keys.count)
    }
}

async fn run_migrate(uri: &str, key: &[String], as_json: bool) -> Result<(), Failure> {
    crate::open(uri).await?;
    let names: Vec<&str> = key.iter().map(String::as_str).collect();
    let activity = Activity::start(format!("migrating {uri} to key {key:?}, main and every branch"), as_json);
    let report = migrate_with_progress(uri, &names, &activity.progress()).await.map_err(library_failure);
    drop(activity);
    let report = report?;
    // The migration walks physical Lance branches: name them as the user knows them.
    let logical: LogicalNames = match lance_actions_replay::Branches::new(uri).list().await {
        Ok(list) => list.into_iter().map(|(name, physical)| (physical, name)).collect(),
        Err(_) => LogicalNames::new(),
    };
    if as_json {
        println!("{}", migration_json(uri, &report, &logical));
    } else {
        print_migration(uri, &report, &logical);
    }
    Ok(())
}

fn migration_json(uri: &str, report: &MigrationReport, logical: &LogicalNames) -> serde_json::Value {
    let branches: Vec<_> = report
        .branches
        .iter()
        .map(|b| {
            let mut out = json!({"branch": display_branch(&b.branch, logical), "physical": b.branch, "rows": b.rows});
            match b.step {
                BranchStep::AlreadyKeyed => out["step"] = json!("already_keyed"),
                BranchStep::Installed { version } => {
                    out["step"] = json!("installed");
                    out["version"] = json!(version);
                }
            }
            out
        })
        .collect();
    json!({"uri": uri, "key": report.key, "branches": branches, "stamped": report.stamped})
}

fn print_migration(uri: &str, report: &MigrationReport, logical: &LogicalNames) {
    println!("migrate {uri} to key {:?}", report.key);
    for b in &report.branches {
        let name = display_branch(&b.branch, logical);
        match b.step {
            BranchStep::AlreadyKeyed => println!("  {name}: already keyed, {} row(s)", b.rows),
            BranchStep::Installed { version } => println!("  {name}: installed at v{version}, {} row(s)", b.rows),
        }
    }
    if report.stamped {
        println!("fencing stamp: written");
    } else {
        println!("fencing stamp: already present");
    }
}
