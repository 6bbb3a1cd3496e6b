//! The graph schema file: node and edge types, their property types and constraints.
//!
//! Parsed from JSON by hand (not through serde derive) so every mistake is a typed error naming
//! the type and property the user wrote.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use serde_json::Value as Json;

use crate::error::{Error, Result};

/// A property's value type.
#[derive(Debug, Clone, PartialEq)]
pub enum PropType {
    String,
    Int64,
    Float64,
    Bool,
    /// A fixed-size float32 vector.
    Vector(i32),
}

impl PropType {
    fn parse(text: &str) -> Option<PropType> {
        Some(match text {
            "string" => PropType::String,
            "int64" => PropType::Int64,
            "float64" => PropType::Float64,
            "bool" => PropType::Bool,
            other => {
                let n = other.strip_prefix("vector(")?.strip_suffix(')')?.parse::<i32>().ok()?;
                if n <= 0 {
                    return None;
                }
                PropType::Vector(n)
            }
        })
    }

    pub fn data_type(&self) -> DataType {
        match self {
            PropType::String => DataType::Utf8,
            PropType::Int64 => DataType::Int64,
            PropType::Float64 => DataType::Float64,
            PropType::Bool => DataType::Boolean,
            PropType::Vector(n) => DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), *n),
        }
    }
}

/// One column of a type's table, with its constraints.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: PropType,
    pub nullable: bool,
    pub unique: bool,
    /// Inclusive bounds for numeric properties.
    pub range: Option<(f64, f64)>,
    /// Allowed values for string properties.
    pub allowed: Option<Vec<String>>,
}

impl Column {
    fn key(name: &str) -> Column {
        Column { name: name.into(), ty: PropType::String, nullable: false, unique: false, range: None, allowed: None }
    }
}

/// A node type or an edge type.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeDef {
    pub name: String,
    /// `Some((src_type, dst_type))` for an edge type.
    pub endpoints: Option<(String, String)>,
    pub max_out: Option<u64>,
    /// `id`, then `src` and `dst` for an edge, then the properties in schema order.
    pub columns: Vec<Column>,
}

impl TypeDef {
    pub fn is_edge(&self) -> bool {
        self.endpoints.is_some()
    }

    /// `node:Person` or `edge:Knows`, the label conflicts carry.
    pub fn key(&self) -> String {
        format!("{}:{}", if self.is_edge() { "edge" } else { "node" }, self.name)
    }

    /// The directory name of this type's table under the graph root.
    pub fn table_dir(&self) -> String {
        format!("{}_{}.lance", if self.is_edge() { "edge" } else { "node" }, self.name)
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn arrow_schema(&self) -> Arc<ArrowSchema> {
        let fields: Vec<Field> =
            self.columns.iter().map(|c| Field::new(&c.name, c.ty.data_type(), c.nullable)).collect();
        Arc::new(ArrowSchema::new(fields))
    }
}

/// The whole schema: types by name (node and edge names share one namespace).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphSchema {
    pub types: BTreeMap<String, TypeDef>,
    /// The file's text, kept so the graph root stores exactly what the user gave.
    pub source: String,
}

impl GraphSchema {
    pub fn parse(text: &str) -> Result<GraphSchema> {
        let json: Json = serde_json::from_str(text)
            .map_err(|e| Error::Schema { detail: format!("the schema is not valid JSON: {e}") })?;
        let Some(top) = json.as_object() else {
            return Err(schema_err("the schema must be a JSON object with \"nodes\" and \"edges\""));
        };
        for key in top.keys() {
            if key != "nodes" && key != "edges" {
                return Err(schema_err(format!("unknown top-level key '{key}' (expected \"nodes\" and \"edges\")")));
            }
        }
        let mut types = BTreeMap::new();
        for (name, def) in objects(top.get("nodes"), "nodes")? {
            let t = parse_type(name, def, None)?;
            types.insert(name.clone(), t);
        }
        for (name, def) in objects(top.get("edges"), "edges")? {
            if types.contains_key(name) {
                return Err(schema_err(format!("type '{name}' is declared both as a node and as an edge")));
            }
            let obj = def.as_object().ok_or_else(|| schema_err(format!("edge '{name}' must be an object")))?;
            let endpoint = |which: &str| -> Result<String> {
                let target = obj
                    .get(which)
                    .and_then(Json::as_str)
                    .ok_or_else(|| schema_err(format!("edge '{name}' needs \"{which}\": a node type")))?;
                match types.get(target) {
                    Some(t) if !t.is_edge() => Ok(target.to_string()),
                    _ => Err(schema_err(format!("edge '{name}' {which} '{target}' is not a node type"))),
                }
            };
            let endpoints = (endpoint("src")?, endpoint("dst")?);
            let t = parse_type(name, def, Some(endpoints))?;
            types.insert(name.clone(), t);
        }
        Ok(GraphSchema { types, source: text.to_string() })
    }

    pub fn get(&self, name: &str) -> Result<&TypeDef> {
        self.types.get(name).ok_or_else(|| Error::UnknownType { name: name.to_string() })
    }

    /// Edge types with `node` as src or dst.
    pub fn edges_touching<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a TypeDef> + 'a {
        self.types.values().filter(move |t| matches!(&t.endpoints, Some((s, d)) if s == node || d == node))
    }
}

fn schema_err(detail: impl Into<String>) -> Error {
    Error::Schema { detail: detail.into() }
}

fn objects<'a>(value: Option<&'a Json>, what: &str) -> Result<Vec<(&'a String, &'a Json)>> {
    match value {
        None => Ok(Vec::new()),
        Some(Json::Object(map)) => Ok(map.iter().collect()),
        Some(_) => Err(schema_err(format!("\"{what}\" must be an object of type name -> definition"))),
    }
}

/// Names end up in filter expressions and directory names: keep them plain identifiers.
fn check_ident(name: &str, what: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(schema_err(format!("{what} '{name}' must be letters, digits and '_', not starting with a digit")));
    }
    Ok(())
}

fn parse_type(name: &str, def: &Json, endpoints: Option<(String, String)>) -> Result<TypeDef> {
    check_ident(name, "type name")?;
    let obj = def.as_object().ok_or_else(|| schema_err(format!("type '{name}' must be an object")))?;
    let allowed_keys: &[&str] =
        if endpoints.is_some() { &["src", "dst", "max_out", "properties"] } else { &["properties"] };
    for key in obj.keys() {
        if !allowed_keys.contains(&key.as_str()) {
            return Err(schema_err(format!("type '{name}' has unknown key '{key}'")));
        }
    }
    let max_out = match obj.get("max_out") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| schema_err(format!("edge '{name}' max_out must be a whole number")))?),
    };
    let mut columns = vec![Column::key("id")];
    if endpoints.is_some() {
        columns.push(Column::key("src"));
        columns.push(Column::key("dst"));
    }
    for (prop, spec) in objects(obj.get("properties"), &format!("{name}.properties"))? {
        check_ident(prop, "property name")?;
        if columns.iter().any(|c| &c.name == prop) {
            return Err(schema_err(format!("property '{name}.{prop}' uses a reserved or repeated name")));
        }
        columns.push(parse_column(name, prop, spec)?);
    }
    Ok(TypeDef { name: name.to_string(), endpoints, max_out, columns })
}

fn parse_column(ty: &str, prop: &str, spec: &Json) -> Result<Column> {
    let where_ = format!("{ty}.{prop}");
    let (type_text, obj) = match spec {
        Json::String(s) => (s.as_str(), None),
        Json::Object(o) => {
            let t = o
                .get("type")
                .and_then(Json::as_str)
                .ok_or_else(|| schema_err(format!("property '{where_}' needs a \"type\"")))?;
            (t, Some(o))
        }
        _ => return Err(schema_err(format!("property '{where_}' must be a type name or an object"))),
    };
    let ty_parsed = PropType::parse(type_text).ok_or_else(|| {
        schema_err(format!(
            "property '{where_}' has unknown type '{type_text}' (use string, int64, float64, bool or vector(N))"
        ))
    })?;
    let mut column =
        Column { name: prop.to_string(), ty: ty_parsed, nullable: true, unique: false, range: None, allowed: None };
    let Some(obj) = obj else { return Ok(column) };
    for (key, value) in obj {
        match key.as_str() {
            "type" => {}
            "unique" => {
                column.unique =
                    value.as_bool().ok_or_else(|| schema_err(format!("'{where_}' unique must be true or false")))?;
                if column.unique && !matches!(column.ty, PropType::String | PropType::Int64 | PropType::Bool) {
                    return Err(schema_err(format!("'{where_}': unique is supported on string, int64 and bool")));
                }
            }
            "nullable" => {
                column.nullable =
                    value.as_bool().ok_or_else(|| schema_err(format!("'{where_}' nullable must be true or false")))?;
            }
            "range" => {
                let bounds =
                    value.as_array().filter(|a| a.len() == 2).and_then(|a| Some((a[0].as_f64()?, a[1].as_f64()?)));
                let Some(bounds) = bounds else {
                    return Err(schema_err(format!("'{where_}' range must be [min, max]")));
                };
                if !matches!(column.ty, PropType::Int64 | PropType::Float64) {
                    return Err(schema_err(format!("'{where_}': range applies to int64 and float64")));
                }
                column.range = Some(bounds);
            }
            "enum" => {
                let values: Option<Vec<String>> =
                    value.as_array().map(|a| a.iter().map(|v| v.as_str().map(String::from)).collect()).unwrap_or(None);
                let Some(values) = values else {
                    return Err(schema_err(format!("'{where_}' enum must be a list of strings")));
                };
                if column.ty != PropType::String {
                    return Err(schema_err(format!("'{where_}': enum applies to string properties")));
                }
                column.allowed = Some(values);
            }
            other => return Err(schema_err(format!("property '{where_}' has unknown key '{other}'"))),
        }
    }
    Ok(column)
}
