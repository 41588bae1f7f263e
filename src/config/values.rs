//! Parsers for option values that the command line, the environment and a profile
//! share: sizes (`50M`, `1G`), durations (`90s`, `5m`), numbers, switches and the
//! value enums (clap's own `ValueEnum`s). One parser per type, whatever the source.

use std::time::Duration;

use super::FailFast;
use crate::model::Device;

/// A size such as `512K`, `50M`, `1.5G` or a plain byte count.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((t, ""), |i| t.split_at(i));
    let mult: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("unknown unit in {s:?} (use K, M, G or T)")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 50M or 1G"))?;
    Ok((value * mult as f64) as u64)
}

/// A positive duration; a bare number is seconds (`90` is `90s`). Values starting
/// with `-` get this message rather than a parser's "unexpected argument".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err("must be positive: use a duration such as 90s, 5m or 1h".into());
    }
    if let Ok(seconds) = s.trim().parse::<f64>() {
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("{s:?} is too large (use a duration such as 90s, 5m or 1h)"));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!("{e} (use a duration such as 90s, 5m or 1h; a bare number is seconds)")
    })
}

/// `--fail-fast`'s value from any source: off, wait or now, or a switch's value
/// (true is wait, false off), as a variable or a profile gives it.
pub fn fail_fast(s: &str) -> Result<FailFast, String> {
    match boolish(s) {
        Some(true) => Ok(FailFast::Wait),
        Some(false) => Ok(FailFast::Off),
        None => choice(s),
    }
}

/// A device name as `--device` takes it (`cuda` and `rocm` mean `gpu`).
pub fn parse_device(s: &str) -> Result<Device, String> {
    choice(s)
}

/// One of a value enum's names or aliases, in any case, as clap takes it.
pub fn choice<T: clap::ValueEnum>(s: &str) -> Result<T, String> {
    T::from_str(s.trim(), true).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .map(|p| p.get_name().to_string())
            .collect();
        format!("{:?} is not one of {}", s.trim(), names.join(", "))
    })
}

/// A whole number, of whatever width the option holds.
pub fn number<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{:?} is not a whole number in range", s.trim()))
}

/// A switch's value from a variable or a profile: 1/0, true/false, yes/no, on/off
/// (empty is off).
pub fn boolish(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("50M").unwrap(), 50 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_size("3Q").is_err());
    }

    #[test]
    fn durations_and_devices() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("-5s").unwrap_err().contains("positive"));
        // A bare number is seconds.
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration(" 2.5 ").unwrap(),
            Duration::from_millis(2500)
        );
        let err = parse_duration("banana").unwrap_err();
        assert!(
            err.contains("90s, 5m or 1h") && err.contains("seconds"),
            "{err}"
        );
        assert_eq!(fail_fast("now").unwrap(), FailFast::Now);
        assert_eq!(fail_fast("1").unwrap(), FailFast::Wait);
        assert_eq!(fail_fast("false").unwrap(), FailFast::Off);
        assert!(fail_fast("later").unwrap_err().contains("off, wait, now"));
        assert_eq!(parse_device("CUDA").unwrap(), Device::Gpu);
        assert!(parse_device("npu").unwrap_err().contains("auto, cpu, gpu"));
        assert_eq!(parse_device(" rocm ").unwrap(), Device::Gpu);
        assert_eq!(number::<u32>("7").unwrap(), 7);
        assert!(number::<usize>("-1").is_err());
        assert_eq!(boolish("On"), Some(true));
        assert_eq!(boolish("maybe"), None);
    }
}
