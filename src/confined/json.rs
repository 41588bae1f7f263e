//! JSON a script wrote, parsed within a memory budget. A `serde_json::Value` costs
//! far more than its text: 16 MiB of `1,1,1,…` takes about 256 MiB, and of
//! `[[1,2],[3]],…` over 600 MiB. So the file is bounded in bytes, the values it makes
//! are bounded by an estimate of what they cost, and only one such parse runs at a
//! time in the process, however many scripts finish together.

use std::cell::Cell;
use std::path::Path;
use std::sync::Mutex;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{open_in, Refused};

/// Held while a budgeted parse runs: at most one file buffer and one parsed document
/// in memory at once.
static PARSING: Mutex<()> = Mutex::new(());

/// What one value costs at most, bytes: the 32-byte `Value`, counted twice because a
/// growing `Vec` holds up to twice what it uses.
const PER_VALUE: u64 = 64;
/// What one array or object costs beyond its members: its allocation and the
/// allocator's overhead.
const PER_CONTAINER: u64 = 64;

/// The JSON file `path` (a regular file in a trusted folder, at most `max_bytes`),
/// parsed into a value whose estimated memory stays within `budget` bytes. `Ok(None)`
/// when it is not valid JSON: that is the script's business, not a danger.
pub fn read_json_in(path: &Path, max_bytes: u64, budget: u64) -> Result<Option<Value>, Refused> {
    parse(path, max_bytes, budget, true)
}

/// Checks what [`read_json_in`] would refuse, building nothing: the file's kind, its
/// size, and what its values would cost.
pub fn check_json_in(path: &Path, max_bytes: u64, budget: u64) -> Result<(), Refused> {
    parse(path, max_bytes, budget, false).map(|_| ())
}

fn parse(path: &Path, max_bytes: u64, budget: u64, build: bool) -> Result<Option<Value>, Refused> {
    let _one_at_a_time = PARSING.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = open_in(path)?.read_to_end(max_bytes)?;
    let left = Cell::new(budget);
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    match (Budgeted { left: &left, build }).deserialize(&mut de) {
        Ok(value) if de.end().is_ok() => Ok(Some(value)),
        Ok(_) => Ok(None),
        Err(_) if left.get() == 0 => Err(Refused::TooManyValues { budget }),
        Err(_) => Ok(None),
    }
}

/// Builds a `Value` (or, with `build` false, only walks it), charging each value to
/// `left` and failing once it runs out.
#[derive(Clone, Copy)]
struct Budgeted<'a> {
    left: &'a Cell<u64>,
    build: bool,
}

impl Budgeted<'_> {
    fn charge<E: serde::de::Error>(&self, bytes: u64) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.left.set(0);
                Err(E::custom("over the budget"))
            }
        }
    }

    fn scalar<E: serde::de::Error>(&self, value: impl FnOnce() -> Value) -> Result<Value, E> {
        self.charge(PER_VALUE)?;
        Ok(if self.build { value() } else { Value::Null })
    }
}

impl<'de> DeserializeSeed<'de> for Budgeted<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Budgeted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.scalar(|| Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.scalar(|| Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.scalar(|| Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.scalar(|| Value::from(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(v.len() as u64)?;
        self.scalar(|| Value::String(v.to_owned()))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.scalar(|| Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge(PER_VALUE + PER_CONTAINER)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            if self.build {
                items.push(item);
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge(PER_VALUE + PER_CONTAINER)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // A map entry holds its key and a node of the tree besides the value.
            self.charge(key.len() as u64 + PER_CONTAINER)?;
            let value = map.next_value_seed(self)?;
            if self.build {
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_within_the_budget_and_not_beyond_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r.json");
        std::fs::write(&path, r#"{"beliefs": [[0.5, 0.5], [1, 0]], "n": "x"}"#).unwrap();
        let v = read_json_in(&path, 1 << 20, 1 << 20).unwrap().unwrap();
        assert_eq!(v["beliefs"][1][0], 1);
        assert_eq!(v["n"], "x");
        let err = read_json_in(&path, 1 << 20, 256).unwrap_err();
        assert_eq!(
            err.to_string(),
            "holds more values than the runner parses within 256 bytes"
        );
        assert!(check_json_in(&path, 1 << 20, 256).is_err());
        check_json_in(&path, 1 << 20, 1 << 20).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(read_json_in(&path, 1 << 20, 1 << 20).unwrap(), None);
    }

    #[test]
    fn a_dense_file_costs_what_the_budget_allows() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r.json");
        // 4 MiB of small nested arrays: about 100 MiB as plain `Value`s.
        let body = "[[1,2],[3]],".repeat((4 << 20) / 12);
        std::fs::write(&path, format!("[{body}1]")).unwrap();
        assert!(matches!(
            read_json_in(&path, 16 << 20, 32 << 20),
            Err(Refused::TooManyValues { .. })
        ));
    }
}
