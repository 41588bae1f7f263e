//! A point in time as results hold it: a typed value in the runner and the
//! reports, RFC 3339 in UTC to the millisecond on the wire (`2026-11-22T07:40:35.693Z`).
//! Written once and read once, at the edges of the JSON; nothing in between goes
//! through text.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A timestamp in a result, an attempt or a run's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub SystemTime);

impl Timestamp {
    /// Now.
    pub fn now() -> Timestamp {
        Timestamp(SystemTime::now())
    }

    /// This time plus `seconds` (a duration measured from it).
    pub fn after(self, seconds: f64) -> Timestamp {
        Timestamp(self.0 + Duration::from_secs_f64(seconds.max(0.0)))
    }

    /// The wire form: RFC 3339, UTC, milliseconds.
    pub fn rfc3339(self) -> String {
        humantime::format_rfc3339_millis(self.0).to_string()
    }

    /// Seconds from `earlier` to this time (negative when it is later).
    pub fn secs_since(self, earlier: Timestamp) -> f64 {
        match self.0.duration_since(earlier.0) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        }
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Timestamp {
        Timestamp(t)
    }
}

impl From<Timestamp> for SystemTime {
    fn from(t: Timestamp) -> SystemTime {
        t.0
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        // Weak: a zone other than Z or a missing fraction, as other writers may put it.
        humantime::parse_rfc3339_weak(&text)
            .map(Timestamp)
            .map_err(|e| serde::de::Error::custom(format!("not an RFC 3339 time {text:?}: {e}")))
    }
}

impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "RFC 3339, UTC, milliseconds: 2026-11-22T07:40:35.693Z.",
            "type": "string",
            "format": "date-time"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_round_trips_to_the_millisecond() {
        let t: Timestamp = serde_json::from_str("\"2026-11-22T07:40:35.693Z\"").unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-11-22T07:40:35.693Z\""
        );
        assert_eq!(t.after(1.5).rfc3339(), "2026-11-22T07:40:37.193Z");
        assert_eq!(t.after(1.5).secs_since(t), 1.5);
        assert_eq!(t.secs_since(t.after(2.0)), -2.0);
        assert!(serde_json::from_str::<Timestamp>("\"x\"").is_err());
    }
}
