//! Value types that check themselves while being read, so a bad value is reported at its own
//! line and column with what was expected.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{Deserialize, Deserializer, Error};

/// A duration written as a number and a unit: `250ms`, `2s`, `1.5s`, `1m`, `1h`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dur(pub Duration);

/// The accepted forms, for error messages.
pub const DURATION_FORMS: &str = "a duration such as \"200ms\", \"5s\", \"1.5s\", \"1m\" or \"1h\"";

impl FromStr for Dur {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let seconds_per_unit = match unit {
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("expected {DURATION_FORMS}, found {text:?}")),
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("expected {DURATION_FORMS}, found {text:?}"))?;
        match Duration::try_from_secs_f64(value * seconds_per_unit) {
            Ok(duration) if duration <= LONGEST => Ok(Dur(duration)),
            _ => Err(format!(
                "duration {text:?} is out of range: at most \"87600h\" (ten years)"
            )),
        }
    }
}

/// The longest duration a configuration may name. Every timeout, interval and TTL is added to
/// a clock reading or multiplied by a small count somewhere, which a duration near
/// `Duration::MAX` overflows (a panic in the middle of a request): ten years is beyond any
/// use and far from that edge.
pub const LONGEST: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_secs_f64() * 1000.0;
        if millis >= 1000.0 && millis % 1000.0 == 0.0 {
            write!(f, "{}s", millis / 1000.0)
        } else {
            write!(f, "{millis}ms")
        }
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)
            .map_err(|_| D::Error::custom(format!("expected {DURATION_FORMS} (a string)")))?;
        text.parse().map_err(D::Error::custom)
    }
}

/// A socket address written as `IP:PORT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr(pub SocketAddr);

impl FromStr for Addr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.parse().map(Addr).map_err(|_| {
            format!("expected an address as IP:PORT such as \"127.0.0.1:8080\" or \"[::1]:8080\", found {text:?}")
        })
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer).map_err(|_| {
            D::Error::custom("expected an address as a string such as \"127.0.0.1:8080\"")
        })?;
        text.parse().map_err(D::Error::custom)
    }
}

/// A backend's `address`: `IP:PORT`, or `HOST:PORT` with a DNS name asked at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendAddress {
    Ip(SocketAddr),
    Name { host: String, port: u16 },
}

impl FromStr for BackendAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Ok(address) = text.parse() {
            return Ok(BackendAddress::Ip(address));
        }
        let expected = || {
            format!(
                "expected an address as IP:PORT such as \"127.0.0.1:8080\" or NAME:PORT such as \"api.kargo.test:8080\", found {text:?}"
            )
        };
        let (host, port) = text.rsplit_once(':').ok_or_else(expected)?;
        let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or_else(expected)?;
        if !is_dns_name(host) {
            return Err(expected());
        }
        Ok(BackendAddress::Name {
            host: host.to_owned(),
            port,
        })
    }
}

impl<'de> Deserialize<'de> for BackendAddress {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer).map_err(|_| {
            D::Error::custom("expected an address as a string such as \"127.0.0.1:8080\"")
        })?;
        text.parse().map_err(D::Error::custom)
    }
}

/// A name DNS can ask for: dot-separated labels of letters, digits, `-` and `_` (SRV owners),
/// each 1 to 63 long and not starting or ending with `-`, 253 at most in all, with an
/// optional final dot; not all digits and dots (an IPv4 address that did not read).
pub fn is_dns_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let label = |label: &str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(label)
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// A size in bytes, written as a whole number of bytes or a string with a binary unit:
/// `1048576`, `"512KiB"`, `"1MiB"`, `"2GiB"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

/// The accepted forms, for error messages.
pub const SIZE_FORMS: &str = "a size such as 65536, \"64KiB\", \"1MiB\" or \"1GiB\"";

impl FromStr for Size {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let scale: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            _ => return Err(format!("expected {SIZE_FORMS}, found {text:?}")),
        };
        number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .map(Size)
            .ok_or_else(|| format!("expected {SIZE_FORMS}, found {text:?}"))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(deserializer)
            .map_err(|_| D::Error::custom(format!("expected {SIZE_FORMS}")))?
        {
            Written::Bytes(bytes) => Ok(Size(bytes)),
            Written::Text(text) => text.parse().map_err(D::Error::custom),
        }
    }
}

/// A route's `request_buffering`: `"off"`, `"on"` (64 KiB in memory, then a temporary file) or
/// `"up_to:SIZE"` (SIZE in memory, then a temporary file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Buffering {
    #[default]
    Off,
    /// Bodies read whole first, this many bytes of each in memory.
    InMemoryUpTo(u64),
}

impl Buffering {
    /// What `"on"` keeps in memory before the temporary file: nginx's client body buffer is
    /// 8–16 KiB; a little more keeps most API bodies off the disk.
    pub const ON_MEMORY: u64 = 64 * 1024;
}

impl FromStr for Buffering {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "expected \"off\", \"on\" or \"up_to:SIZE\" such as \"up_to:1MiB\", found {text:?}"
            )
        };
        match text {
            "off" => Ok(Buffering::Off),
            "on" => Ok(Buffering::InMemoryUpTo(Self::ON_MEMORY)),
            _ => {
                let size = text.strip_prefix("up_to:").ok_or_else(expected)?;
                let Size(bytes) = size.parse().map_err(|_| expected())?;
                Ok(Buffering::InMemoryUpTo(bytes))
            }
        }
    }
}

impl<'de> Deserialize<'de> for Buffering {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_their_units() {
        let read = |t: &str| t.parse::<Dur>().map(|d| d.0);
        assert_eq!(read("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(read("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(read("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(read("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(read("250us"), Ok(Duration::from_micros(250)));
    }

    #[test]
    fn a_bad_duration_says_what_was_expected() {
        for bad in ["2 sec", "5", "ms", "-1s", "1..2s", ""] {
            let error = bad.parse::<Dur>().unwrap_err();
            assert!(error.contains("expected a duration"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_duration_past_ten_years_is_refused_before_it_can_overflow_a_clock() {
        assert_eq!(
            "87600h".parse::<Dur>().map(|d| d.0),
            Ok(Duration::from_secs(10 * 365 * 24 * 3600))
        );
        let endless = format!("{}s", "9".repeat(400));
        for long in ["87601h", "5000000000000000000s", &endless] {
            let error = long.parse::<Dur>().unwrap_err();
            assert!(error.contains("at most \"87600h\""), "{long:?}: {error}");
        }
    }

    #[test]
    fn durations_print_back_in_a_readable_unit() {
        assert_eq!(Dur(Duration::from_millis(200)).to_string(), "200ms");
        assert_eq!(Dur(Duration::from_secs(5)).to_string(), "5s");
    }

    #[test]
    fn sizes_take_bytes_or_binary_units() {
        assert_eq!("65536".parse::<Size>(), Ok(Size(65536)));
        assert_eq!("64KiB".parse::<Size>(), Ok(Size(64 << 10)));
        assert_eq!("1 MiB".parse::<Size>(), Ok(Size(1 << 20)));
        assert!("1MB".parse::<Size>().unwrap_err().contains("\"1MiB\""));
        assert!(
            "99999999999GiB".parse::<Size>().is_err(),
            "overflow is refused"
        );
        assert!("".parse::<Size>().is_err());
    }
}
