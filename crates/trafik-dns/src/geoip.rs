//! GeoIP: where an address is — country, continent, autonomous system — from a MaxMind DB
//! file (GeoIP2/GeoLite2 Country, City or ASN, or any database with their fields), read whole
//! into memory with the `maxminddb` crate. Client groups match on these besides prefixes.

use std::fmt;
use std::net::IpAddr;

use maxminddb::Reader;
use serde::Deserialize;

/// A MaxMind database.
pub struct GeoDatabase {
    reader: Reader<Vec<u8>>,
}

impl fmt::Debug for GeoDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let metadata = self.reader.metadata();
        write!(
            f,
            "GeoDatabase({}, {} nodes)",
            metadata.database_type, metadata.node_count
        )
    }
}

/// What the database says of an address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// ISO 3166-1 alpha-2, upper case (`TR`).
    pub country: Option<String>,
    /// MaxMind's two-letter continent code (`EU`).
    pub continent: Option<String>,
    pub asn: Option<u32>,
    /// The length of the database's network holding the address: how far the answer holds.
    pub prefix: u8,
}

/// The fields of a record that trafik reads; absent ones stay `None`.
#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    country: Option<Codes<'a>>,
    #[serde(borrow)]
    continent: Option<Codes<'a>>,
    autonomous_system_number: Option<Unsigned>,
}

/// An unsigned number of whichever width the database stored it in (MaxMind's ASN databases
/// use 32 bits, other writers the smallest that fits).
struct Unsigned(u64);

impl<'de> Deserialize<'de> for Unsigned {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = u64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an unsigned number")
            }
            fn visit_u64<E>(self, value: u64) -> Result<u64, E> {
                Ok(value)
            }
        }
        deserializer.deserialize_any(Visitor).map(Unsigned)
    }
}

#[derive(Deserialize)]
struct Codes<'a> {
    iso_code: Option<&'a str>,
    code: Option<&'a str>,
}

impl GeoDatabase {
    /// The database in `bytes`; an error says why it is not one.
    pub fn read(bytes: Vec<u8>) -> Result<GeoDatabase, String> {
        let reader = Reader::from_source(bytes).map_err(|error| error.to_string())?;
        Ok(GeoDatabase { reader })
    }

    /// Where `address` is; `None` when the database has nothing for it.
    pub fn locate(&self, address: IpAddr) -> Option<Place> {
        let found = self.reader.lookup(address).ok()?;
        let record: Record = found.decode().ok()??;
        let prefix = found.network().ok()?.prefix();
        // An IPv4 address in an IPv6 database sits under ::/96.
        let prefix = match address {
            IpAddr::V4(_) if prefix > 32 => prefix.saturating_sub(96),
            _ => prefix,
        };
        Some(Place {
            country: record
                .country
                .and_then(|c| c.iso_code)
                .map(str::to_ascii_uppercase),
            continent: record
                .continent
                .and_then(|c| c.code)
                .map(str::to_ascii_uppercase),
            asn: record
                .autonomous_system_number
                .and_then(|n| u32::try_from(n.0).ok()),
            prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples' database (examples/dns-zone/make-geo.py).
    pub fn kargo() -> GeoDatabase {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/dns-zone/kargo-geo.mmdb"
        );
        GeoDatabase::read(std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn an_address_has_its_network_s_country_continent_and_asn() {
        let place = kargo().locate("10.2.77.1".parse().unwrap()).unwrap();
        assert_eq!(
            place,
            Place {
                country: Some("DE".into()),
                continent: Some("EU".into()),
                asn: Some(64502),
                prefix: 16,
            }
        );
        assert_eq!(kargo().locate("192.0.2.1".parse().unwrap()), None);
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused() {
        assert!(GeoDatabase::read(b"not a database".to_vec()).is_err());
    }
}
