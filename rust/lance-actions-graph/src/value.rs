//! Typed rows and the row comparator.
//!
//! Equality is Arrow logical equality per column: null differs from "" and from an empty vector,
//! floats and vector elements compare by their exact bits (so NaN equals the same NaN and 0.0
//! differs from -0.0: a change is a change).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, FixedSizeListBuilder, Float32Builder, Float64Builder, Int64Builder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::schema::{PropType, TypeDef};

#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Vector(Vec<f32>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Vector(a), Value::Vector(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A SQL literal for a filter expression (strings quoted, quotes doubled).
    pub fn literal(&self) -> Option<String> {
        match self {
            Value::Str(s) => Some(quote(s)),
            Value::Int(i) => Some(i.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            Value::Null => Json::Null,
            Value::Str(s) => Json::String(s.clone()),
            Value::Int(i) => Json::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map(Json::Number).unwrap_or(Json::Null),
            Value::Bool(b) => Json::Bool(*b),
            Value::Vector(v) => Json::Array(
                v.iter()
                    .map(|x| serde_json::Number::from_f64(*x as f64).map(Json::Number).unwrap_or(Json::Null))
                    .collect(),
            ),
        }
    }
}

/// A SQL string literal.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// One row of a type's table: values in the type's column order (`id` first).
pub type Row = Vec<Value>;

/// The row's id (the first column, a non-null string by construction).
pub fn row_id(row: &Row) -> &str {
    row.first().and_then(Value::as_str).unwrap_or("")
}

/// A row from one JSON object (one line of a JSON lines file; `line` is 1-based, for messages).
pub fn row_from_json(t: &TypeDef, json: &Json, line: usize) -> Result<Row> {
    let Some(obj) = json.as_object() else {
        return Err(input(format!("line {line}: a row must be a JSON object")));
    };
    for key in obj.keys() {
        if t.column_index(key).is_none() {
            return Err(input(format!("line {line}: {} has no property '{key}'", t.key())));
        }
    }
    t.columns
        .iter()
        .map(|c| {
            let v = obj.get(&c.name).unwrap_or(&Json::Null);
            let value = json_value(&c.ty, v).ok_or_else(|| {
                input(format!("line {line}: '{}' of {} must be {}, not {v}", c.name, t.key(), describe(&c.ty)))
            })?;
            if value == Value::Null && !c.nullable {
                return Err(input(format!("line {line}: a {} row needs '{}'", t.key(), c.name)));
            }
            Ok(value)
        })
        .collect()
}

/// A key-only row for a delete: `{"id": ...}`.
pub fn id_from_json(t: &TypeDef, json: &Json, line: usize) -> Result<String> {
    match json.get("id").and_then(Json::as_str) {
        Some(id) => Ok(id.to_string()),
        None => Err(input(format!("line {line}: a {} delete needs a string 'id'", t.key()))),
    }
}

fn describe(ty: &PropType) -> String {
    match ty {
        PropType::String => "a string".into(),
        PropType::Int64 => "a whole number".into(),
        PropType::Float64 => "a number".into(),
        PropType::Bool => "true or false".into(),
        PropType::Vector(n) => format!("a list of {n} numbers"),
    }
}

fn json_value(ty: &PropType, v: &Json) -> Option<Value> {
    if v.is_null() {
        return Some(Value::Null);
    }
    Some(match ty {
        PropType::String => Value::Str(v.as_str()?.to_string()),
        PropType::Int64 => Value::Int(v.as_i64()?),
        PropType::Float64 => Value::Float(v.as_f64()?),
        PropType::Bool => Value::Bool(v.as_bool()?),
        PropType::Vector(n) => {
            let items = v.as_array()?;
            if items.len() != *n as usize {
                return None;
            }
            Value::Vector(items.iter().map(|x| x.as_f64().map(|f| f as f32)).collect::<Option<Vec<f32>>>()?)
        }
    })
}

pub fn row_to_json(t: &TypeDef, row: &Row) -> Json {
    let map: serde_json::Map<String, Json> =
        t.columns.iter().zip(row).map(|(c, v)| (c.name.clone(), v.to_json())).collect();
    Json::Object(map)
}

fn input(detail: String) -> Error {
    Error::Input { detail }
}

/// Rows from Arrow batches (columns by name; a missing nullable property reads as null).
pub fn rows_from_batch(t: &TypeDef, batch: &RecordBatch) -> Result<Vec<Row>> {
    for field in batch.schema().fields() {
        if t.column_index(field.name()).is_none() {
            return Err(input(format!("{} has no property '{}'", t.key(), field.name())));
        }
    }
    let mut columns: Vec<Vec<Value>> = Vec::with_capacity(t.columns.len());
    for c in &t.columns {
        let values = match batch.column_by_name(&c.name) {
            None if c.nullable => vec![Value::Null; batch.num_rows()],
            None => return Err(input(format!("the {} rows have no '{}' column", t.key(), c.name))),
            Some(array) => column_values(&c.ty, array).ok_or_else(|| {
                input(format!(
                    "column '{}' of {} must be {}, not {}",
                    c.name,
                    t.key(),
                    describe(&c.ty),
                    array.data_type()
                ))
            })?,
        };
        if let Some(row) = values.iter().position(|v| *v == Value::Null).filter(|_| !c.nullable) {
            return Err(input(format!("row {} of {} has no '{}'", row + 1, t.key(), c.name)));
        }
        columns.push(values);
    }
    let mut rows: Vec<Row> = (0..batch.num_rows()).map(|_| Vec::with_capacity(t.columns.len())).collect();
    for column in columns {
        for (row, value) in rows.iter_mut().zip(column) {
            row.push(value);
        }
    }
    Ok(rows)
}

fn column_values(ty: &PropType, array: &ArrayRef) -> Option<Vec<Value>> {
    let n = array.len();
    let null_or = |i: usize, f: &dyn Fn(usize) -> Value| if array.is_null(i) { Value::Null } else { f(i) };
    Some(match ty {
        PropType::String => {
            let a = array.as_string_opt::<i32>()?;
            (0..n).map(|i| null_or(i, &|i| Value::Str(a.value(i).to_string()))).collect()
        }
        PropType::Int64 => {
            let a = array.as_primitive_opt::<Int64Type>()?;
            (0..n).map(|i| null_or(i, &|i| Value::Int(a.value(i)))).collect()
        }
        PropType::Float64 => {
            let a = array.as_primitive_opt::<Float64Type>()?;
            (0..n).map(|i| null_or(i, &|i| Value::Float(a.value(i)))).collect()
        }
        PropType::Bool => {
            let a = array.as_boolean_opt()?;
            (0..n).map(|i| null_or(i, &|i| Value::Bool(a.value(i)))).collect()
        }
        PropType::Vector(dim) => {
            let a = array.as_fixed_size_list_opt()?;
            if a.value_length() != *dim {
                return None;
            }
            let items = a.values().as_primitive_opt::<Float32Type>()?;
            let d = *dim as usize;
            (0..n).map(|i| null_or(i, &|i| Value::Vector(items.values()[i * d..(i + 1) * d].to_vec()))).collect()
        }
    })
}

/// Arrow batch of `rows` in the type's table schema.
pub fn rows_to_batch(t: &TypeDef, rows: &[Row]) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = t.columns.iter().enumerate().map(|(i, c)| build_column(&c.ty, rows, i)).collect();
    RecordBatch::try_new(t.arrow_schema(), columns)
        .map_err(|source| Error::Arrow { what: format!("building {} rows", t.key()), source })
}

fn build_column(ty: &PropType, rows: &[Row], i: usize) -> ArrayRef {
    match ty {
        PropType::String => {
            let mut b = StringBuilder::new();
            for r in rows {
                match &r[i] {
                    Value::Str(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        PropType::Int64 => {
            let mut b = Int64Builder::new();
            rows.iter().for_each(|r| b.append_option(if let Value::Int(v) = r[i] { Some(v) } else { None }));
            Arc::new(b.finish())
        }
        PropType::Float64 => {
            let mut b = Float64Builder::new();
            rows.iter().for_each(|r| b.append_option(if let Value::Float(v) = r[i] { Some(v) } else { None }));
            Arc::new(b.finish())
        }
        PropType::Bool => {
            let mut b = BooleanBuilder::new();
            rows.iter().for_each(|r| b.append_option(if let Value::Bool(v) = r[i] { Some(v) } else { None }));
            Arc::new(b.finish())
        }
        PropType::Vector(dim) => {
            let mut b = FixedSizeListBuilder::new(Float32Builder::new(), *dim);
            for r in rows {
                match &r[i] {
                    Value::Vector(v) => {
                        b.values().append_slice(v);
                        b.append(true);
                    }
                    _ => {
                        for _ in 0..*dim {
                            b.values().append_null();
                        }
                        b.append(false);
                    }
                }
            }
            Arc::new(b.finish())
        }
    }
}
